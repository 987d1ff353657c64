"""`agenthub store migrate` / `reindex` show the operator what the storage warns about (a corrupt history line
skipped) on stderr, one line each and no traceback, while its info lines stay quiet."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
import pytest

from agenthub.cli import main
from agenthub.session_keys import SessionKey
from agenthub.storage.files import FileSessionStore
from agenthub.storage.postgres.database import migrate
from tests.support.roots import dirs_in_env

DESK = SessionKey("default", "http", "desk")


def _history_with_a_corrupt_line(root: Path) -> Path:
    """A history of two good records with a corrupt line between them (a disk fault, an edit by hand)."""

    async def write() -> None:
        store = FileSessionStore(root / "data", fsync=False)
        await store.append(DESK, [{"role": "user", "content": "the vault code is CODE-7Q2", "timestamp": 1}])

    asyncio.run(write())
    (history,) = (root / "data" / "default" / "sessions").glob("*.jsonl")
    with history.open("a", encoding="utf-8") as f:
        f.write('{"role": "user", "content": "cut\n')
        f.write('{"role": "user", "content": "after the damage", "timestamp": 2}\n')
    return history


def _warning_lines(err: str, history: Path) -> list[str]:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    assert [line for line in lines if "history_line_corrupt" in line] == lines, err  # nothing else said
    assert len(lines) >= 1 and all(str(history) in line and "line=2" in line for line in lines), err
    return lines


def test_reindex_on_the_files_says_which_history_line_it_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The index skips a corrupt line and says so (the session and the line's number, never its text), indexes the
    lines around it, and keeps its info quiet: the counts on stdout, one warning line on stderr."""
    _history_with_a_corrupt_line(tmp_path)
    dirs_in_env(tmp_path, monkeypatch)
    assert main(["store", "reindex"]) == 0
    captured = capsys.readouterr()
    assert "search index of default: 2 passages from 1 sources" in captured.out
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert lines == [f"agenthub: warning: search_line_corrupt kind=history session={DESK} line=2"], captured.err
    assert "cut" not in captured.err


def test_migrate_says_which_history_line_it_skipped_while_copying(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    history = _history_with_a_corrupt_line(tmp_path)
    dirs_in_env(tmp_path, monkeypatch, postgres_dsn)
    assert main(["store", "migrate", "--from", "files", "--to", "postgres"]) == 0
    captured = capsys.readouterr()
    assert "verified: every item copied matches the files" in captured.out
    assert len(_warning_lines(captured.err, history)) == 1, captured.err  # read once: copied, then verified


def test_migrate_says_which_record_of_the_database_it_skipped_but_not_the_databases_failures_twice(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The database's session of the same key holds a record that is no JSON object (written by hand): the reader
    skips it with a warning, which is the operator's to see like a corrupt history line of the files; a failure
    of the database itself stays the command's one line (`store_unavailable`, `store_refused` are not said)."""
    history = _history_with_a_corrupt_line(tmp_path)
    dirs_in_env(tmp_path, monkeypatch, postgres_dsn)

    async def plant() -> None:
        await migrate(postgres_dsn)
        async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
            await conn.execute(
                "INSERT INTO session_records (agent, channel, chat_id, seq, record) VALUES (%s, %s, %s, 0, '[1]')",
                (DESK.agent, DESK.channel, DESK.chat_id),
            )

    asyncio.run(plant())
    assert main(["store", "migrate", "--from", "files", "--to", "postgres"]) == 0  # a record with no head: no session
    err = capsys.readouterr().err
    skipped = [line for line in err.splitlines() if "history_record_skipped" in line]
    assert skipped and all(f"session={DESK}" in line for line in skipped), err
    assert "store_unavailable" not in err and "store_refused" not in err, err
    assert all(str(history) in line for line in err.splitlines() if "history_line_corrupt" in line), err
