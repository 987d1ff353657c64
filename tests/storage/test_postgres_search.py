"""`PostgresSearchIndex`: sessions and memory files indexed up to a watermark from the history tables, BM25 in SQL,
rewrites indexed again, the scope a filter of the query (with a plain whitespace tokeniser: the store never
tokenises)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg
import pytest

from agenthub.storage.keys import SessionKey
from agenthub.storage.postgres import Database, PostgresSessionStore
from agenthub.storage.postgres.search import IndexDoc, IndexScope, PostgresSearchIndex, memory_source
from tests.support.postgres import migrated

KEY = SessionKey("a", "http", "one")
OTHER = SessionKey("a", "wecom", "two")


def _docs(kind: str, records: Sequence[tuple[int, dict[str, Any]]], start: int) -> list[IndexDoc]:
    return [
        IndexDoc(seq, str(r["role"]), "", r.get("timestamp"), r["content"], _terms(r["content"]))
        for seq, r in records
        if seq >= start
    ]


def _lines(text: str) -> list[IndexDoc]:
    return [IndexDoc(n, "memory", "", None, line, _terms(line)) for n, line in enumerate(text.splitlines()) if line]


def _terms(text: str) -> dict[str, int]:
    return dict(Counter(text.lower().split()))


def _user(text: str, ts: int = 1) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": ts}


@pytest.fixture
async def parts(postgres_dsn: str) -> AsyncIterator[tuple[PostgresSessionStore, PostgresSearchIndex, str]]:
    dsn = migrated(postgres_dsn)
    database = Database(dsn)
    yield PostgresSessionStore(database), PostgresSearchIndex(database), dsn
    await database.close()


def _scope(*sources: str, channels: tuple[str, ...] = ()) -> IndexScope:
    return IndexScope(tuple(sources), channels)


async def _texts(index: PostgresSearchIndex, query: str, scope: IndexScope, limit: int = 10) -> list[str]:
    return [hit.text for hit in await index.search("a", query.split(), scope, limit)]


async def test_appends_are_indexed_from_the_watermark_and_ranked_by_bm25(
    parts: tuple[PostgresSessionStore, PostgresSearchIndex, str],
) -> None:
    sessions, index, _ = parts
    await sessions.append(KEY, [_user("apple banana", 1), _user("apple cherry cherry", 2), _user("apple", 3)])
    assert await index.lagging("a") == [KEY]
    assert await index.sync_session(KEY, _docs) == 3
    assert await index.lagging("a") == []
    await sessions.append(KEY, [_user("banana split", 4)])
    assert await index.lagging("a") == [KEY]
    assert await index.sync_session(KEY, _docs) == 1  # only the new one
    assert await index.sync_session(KEY, _docs) == 0

    hits = await index.search("a", ["cherry", "apple"], _scope(str(KEY)), 10)
    assert [h.text for h in hits] == ["apple cherry cherry", "apple", "apple banana"]
    # the same formula by hand: N = 4, avgdl = 8 / 4, df(apple) = 3, df(cherry) = 1
    n, avgdl = 4, 2.0

    def part(tf: int, df: int, length: int) -> float:
        return math.log(1 + (n - df + 0.5) / (df + 0.5)) * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / avgdl))

    assert hits[0].score == pytest.approx(part(1, 3, 3) + part(2, 1, 3), rel=1e-12)
    assert hits[1].score == pytest.approx(part(1, 3, 1), rel=1e-12)
    # equal scores: the newer first
    await sessions.append(KEY, [_user("banana", 9), _user("banana", 8)])
    await index.sync_session(KEY, _docs)
    assert [h.ts for h in await index.search("a", ["banana"], _scope(str(KEY)), 2)] == [9, 8]


async def test_a_replace_or_clear_is_indexed_again_and_the_archive_too(
    parts: tuple[PostgresSessionStore, PostgresSearchIndex, str],
) -> None:
    sessions, index, dsn = parts
    await sessions.append(KEY, [_user("old words here", 1), _user("kept tail", 2)])
    await index.sync_session(KEY, _docs)
    await sessions.replace(KEY, [_user("kept tail", 2)], archive=[_user("old words here", 1)])
    assert await index.lagging("a") == [KEY]
    await index.sync_session(KEY, _docs)
    hits = await index.search("a", ["old", "kept"], _scope(str(KEY)), 10)
    assert sorted((h.kind, h.text) for h in hits) == [("archive", "old words here"), ("history", "kept tail")]
    await sessions.clear(KEY, archive=[_user("kept tail", 2)])
    await sessions.append(KEY, [_user("fresh start", 3), _user("second", 4), _user("third", 5)])
    await index.sync_session(KEY, _docs)
    assert sorted(await _texts(index, "kept fresh old", _scope(str(KEY)))) == sorted(
        ["kept tail", "fresh start", "old words here"]
    )
    assert await _row_count(dsn, "search_docs") == 5  # archive 2, history 3: no stale copy
    await sessions.delete(KEY)
    assert await index.lagging("a") == [KEY]
    await index.sync_session(KEY, _docs)
    assert await _row_count(dsn, "search_docs") == 0
    assert await _row_count(dsn, "search_postings") == 0
    assert await index.stats("a") == {"docs": 0, "sources": 2}


async def test_the_scope_is_sources_and_channels(
    parts: tuple[PostgresSessionStore, PostgresSearchIndex, str],
) -> None:
    sessions, index, _ = parts
    await sessions.append(KEY, [_user("secret alpha")])
    await sessions.append(OTHER, [_user("secret beta")])
    for key in await index.lagging("a"):
        await index.sync_session(key, _docs)
    mem = memory_source("USER.md")
    await index.sync_memory("a", mem, "secret gamma\n\nother line", _lines)
    assert await _texts(index, "secret", _scope(str(KEY))) == ["secret alpha"]
    assert sorted(await _texts(index, "secret", _scope(mem, channels=("http",)))) == ["secret alpha", "secret gamma"]
    assert await _texts(index, "secret", _scope(channels=("wecom",))) == ["secret beta"]
    assert await _texts(index, "secret", _scope()) == []
    await index.sync_memory("a", mem, "changed", _lines)
    assert await _texts(index, "secret", _scope(mem)) == []
    await index.sync_memory("a", mem, None, _lines)
    assert await _texts(index, "changed", _scope(mem)) == []


async def test_query_text_is_data_never_syntax(parts: tuple[PostgresSessionStore, PostgresSearchIndex, str]) -> None:
    sessions, index, _ = parts
    odd = '\'); DROP TABLE search_docs; -- "x" * AND NEAR ( ) : \x01'
    await sessions.append(KEY, [_user(odd)])
    await index.sync_session(KEY, _docs)
    assert await _texts(index, odd, _scope(str(KEY))) == [odd]


async def _row_count(dsn: str, table: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cursor = await conn.execute(f"SELECT count(*) FROM {table}")
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])
