"""`agenthub store migrate --from files --to postgres` leaves a working memory_search index, and
`agenthub store reindex` builds it again from the stored histories, on PostgreSQL and on the files."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest

from agenthub.cli import main
from agenthub.search.service import SearchService
from agenthub.search.shared import SharedSearchService
from agenthub.session_keys import SessionKey
from agenthub.storage.files import FileSessionStore
from agenthub.storage.postgres import Database
from agenthub.storage.postgres.search import PostgresSearchIndex
from agenthub.storage.postgres.search_sync import PostgresIndexFeed
from agenthub.storage.search_index import SearchScope
from tests.support.roots import dirs_in_env

EVERYWHERE = SearchScope(None, agent_scoped=lambda _: True)
DESK = SessionKey("default", "http", "desk")


def _write_files(root: Path) -> None:
    async def write() -> None:
        store = FileSessionStore(root / "data", fsync=False)
        await store.append(DESK, [{"role": "user", "content": "the vault code is CODE-7Q2", "timestamp": 1}])
        await store.append(
            SessionKey("default", "cli", "term"), [{"role": "user", "content": "我们的暗号是夜莺", "timestamp": 2}]
        )

    asyncio.run(write())


def _search(dsn: str, query: str) -> list[str]:
    async def ask() -> list[str]:
        database = Database(dsn)
        try:
            search = SharedSearchService(PostgresSearchIndex(database), PostgresIndexFeed(database))
            return [h.passage.text for h in await search.search("default", query, EVERYWHERE, 5)]
        finally:
            await database.close()

    return asyncio.run(ask())


def _index_rows(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM search_docs").fetchone()
    return int(row[0]) if row else 0


def test_migrate_leaves_a_working_index_and_reindex_builds_it_again(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_files(tmp_path)
    dirs_in_env(tmp_path, monkeypatch, postgres_dsn)
    assert main(["store", "migrate", "--from", "files", "--to", "postgres"]) == 0
    assert "search index of default: 2 sessions indexed now, 2 passages in all" in capsys.readouterr().out
    assert _index_rows(postgres_dsn) == 2  # indexed by the migration itself, before any search
    assert _search(postgres_dsn, "what is the vault code?")[:1] == ["the vault code is CODE-7Q2"]  # 暗号 is related

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # a damaged index: rows lost, one left wrong
        conn.execute("DELETE FROM search_blocks WHERE term = 'code-7q2'")
        conn.execute("UPDATE search_docs SET body = 'garbage' WHERE body LIKE '%暗号%'")
    monkeypatch.setenv("AGENTHUB_STORE__BACKEND", "postgres")
    assert main(["store", "reindex"]) == 0
    assert "search index of default: 2 passages from" in capsys.readouterr().out
    assert _search(postgres_dsn, "CODE-7Q2")[:1] == ["the vault code is CODE-7Q2"]
    assert _search(postgres_dsn, "暗号") == ["我们的暗号是夜莺", "the vault code is CODE-7Q2"]  # then a related word


def test_reindex_on_the_files_builds_each_agents_index_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_files(tmp_path)
    dirs_in_env(tmp_path, monkeypatch)
    index_dir = tmp_path / "data" / "default" / "index"
    index_dir.mkdir(parents=True)
    (index_dir / "search.sqlite3").write_bytes(b"not a database")
    assert main(["store", "reindex"]) == 0
    assert "search index of default: 2 passages from 2 sources" in capsys.readouterr().out

    async def ask() -> list[str]:
        service = SearchService(tmp_path / "data")
        try:
            return [h.passage.text for h in await service.search("default", "夜莺", EVERYWHERE, 5)]
        finally:
            await service.close()

    assert asyncio.run(ask()) == ["我们的暗号是夜莺"]


def test_reindex_on_the_files_takes_only_agents_not_the_usage_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`data/usage/` and `data/usage-spool/` are the usage journal beside the agents' directories: no agent's, so
    no index is built in them and the command names only the agents."""
    _write_files(tmp_path)
    dirs_in_env(tmp_path, monkeypatch)
    for journal in ("usage/2026-12", "usage-spool"):
        (tmp_path / "data" / journal).mkdir(parents=True)
    assert main(["store", "reindex"]) == 0
    assert capsys.readouterr().out == "search index of default: 2 passages from 2 sources\n"
    assert not (tmp_path / "data" / "usage" / "index").exists()
    assert not (tmp_path / "data" / "usage-spool" / "index").exists()
