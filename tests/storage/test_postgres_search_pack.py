"""The packer hands pending docs over to term blocks: a search during a pack finds what it found before and after
(also an instance holding postings in memory), a write or a removal meanwhile waits and then lands or leaves nothing,
and a pack cut short (its connection killed mid-transaction) loses nothing."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from agenthub.search.shared import record_docs
from agenthub.search.text import query_terms
from agenthub.session_keys import SessionKey
from agenthub.storage.postgres import Database, PostgresSessionStore
from agenthub.storage.postgres.search import PostgresSearchIndex
from agenthub.storage.postgres.search_cache import PostingsCache
from agenthub.storage.postgres.search_pack import pack, pack_pending
from agenthub.storage.postgres.search_sync import PostgresIndexFeed
from agenthub.storage.search_index import SearchScope
from tests.support.postgres import migrated, rows_holding

WORDS = ["apple", "pear", "plum", "budget", "meeting", "预算", "会议", "客户", "nightingale", "CODE-7Q2"]
QUERIES = ["apple budget", "预算 会议", "nightingale", "CODE-7Q2 plum", "pear meeting 客户"]
EVERY = SearchScope(None, agent_scoped=lambda _: True)
KEYS = [SessionKey("a", ("http", "wecom")[s % 2], f"chat-{s}") for s in range(4)]


def _records(rng: random.Random, start: int, count: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": " ".join(rng.choices(WORDS, k=5)), "timestamp": 1000 + start + i}
        for i in range(count)
    ]


class Parts:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.database = Database(dsn)
        self.sessions = PostgresSessionStore(self.database)
        self.feed = PostgresIndexFeed(self.database)
        self.plain = PostgresSearchIndex(self.database, cache=PostingsCache(cached_df=10**9))
        self.cached = PostgresSearchIndex(self.database, cache=PostingsCache(cached_df=10))

    async def fill(self, seed: int, count: int = 30) -> None:
        rng = random.Random(seed)
        for at, key in enumerate(KEYS):
            await self.sessions.append(key, _records(rng, seed * 1000 + at * 100, count))
        await self.feed.sync_sessions(KEYS, record_docs)

    async def found(self) -> list[list[tuple[str, int, str]]]:
        """Every query's hits from both instances (asserted alike): (session, seq, text)."""
        results = []
        for query in QUERIES:
            for scope in (EVERY, SearchScope(str(KEYS[0]))):
                hits = [await index.search("a", query_terms(query), scope, 8) for index in (self.plain, self.cached)]
                shown = [[(h.passage.source.session, h.passage.seq, h.passage.text) for h in found] for found in hits]
                assert shown[0] == shown[1], query
                results.append(shown[0])
        return results

    async def stats(self) -> tuple[int, int, int]:
        """(pending docs, blocks, docs)."""
        async with await psycopg.AsyncConnection.connect(self.dsn) as conn:
            cursor = await conn.execute(
                "SELECT (SELECT pending FROM search_stats WHERE agent = 'a'), (SELECT count(*) FROM search_blocks), "
                "(SELECT count(*) FROM search_docs)"
            )
            row = await cursor.fetchone()
        assert row is not None
        return int(row[0]), int(row[1]), int(row[2])

    async def rows_holding(self, text: str) -> int:
        return await rows_holding(self.dsn, text, ("search_docs", "search_blocks", "search_terms", "search_names"))


@pytest.fixture
async def parts(postgres_dsn: str) -> AsyncIterator[Parts]:
    p = Parts(migrated(postgres_dsn))
    yield p
    await p.database.close()


async def test_a_search_during_a_pack_finds_the_same_and_a_write_meanwhile_lands_after_it(parts: Parts) -> None:
    await parts.fill(1)
    await pack_pending(parts.database, "a")  # some in blocks already, the rest pending
    await parts.fill(2)
    before = await parts.found()
    assert sum(map(len, before)) > 20
    assert (await parts.stats())[0] == 4 * 30

    async with await psycopg.AsyncConnection.connect(parts.dsn) as conn:
        async with conn.transaction():
            assert await pack(conn, "a") == 4 * 30  # packed, not committed yet
            assert await parts.found() == before  # the search's snapshot: the docs still pending
            await parts.sessions.append(KEYS[0], [{"role": "user", "content": "zebracorn budget", "timestamp": 9}])
            writing = asyncio.create_task(parts.feed.sync_sessions([KEYS[0]], record_docs))
            await asyncio.sleep(0.2)
            assert not writing.done()  # the write waits for the agent's stats row the packer holds
        assert await writing == 1
    assert (await parts.stats())[0] == 1  # only the write after the pack is pending
    hits = await parts.cached.search("a", query_terms("zebracorn"), EVERY, 5)
    assert [h.passage.text for h in hits] == ["zebracorn budget"]
    await parts.found()  # both instances alike: the cached one's memory took the packed docs over, none twice


async def test_a_pack_killed_midway_loses_nothing_and_the_next_pack_finishes_it(parts: Parts) -> None:
    await parts.fill(4)
    before = await parts.found()
    pending, blocks, docs = await parts.stats()
    assert (pending, blocks, docs) == (4 * 30, 0, 4 * 30)

    conn = await psycopg.AsyncConnection.connect(parts.dsn)
    try:
        await conn.execute("BEGIN")
        assert await pack(conn, "a") == 4 * 30
        pid = conn.info.backend_pid
        async with await psycopg.AsyncConnection.connect(parts.dsn, autocommit=True) as killer:
            await killer.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(psycopg.OperationalError):
            await conn.execute("COMMIT")
    finally:
        await conn.close()
    assert await parts.stats() == (pending, blocks, docs)  # as before the pack: every doc still pending
    assert await parts.found() == before
    assert await pack_pending(parts.database, "a") == 4 * 30
    pending, blocks, _ = await parts.stats()
    assert pending == 0 and blocks > 0
    assert await parts.found() == before


async def test_a_removal_during_a_pack_waits_for_it_and_leaves_nothing_in_the_blocks(parts: Parts) -> None:
    await parts.fill(5)
    await parts.sessions.append(KEYS[1], [{"role": "user", "content": "zebracorn apple", "timestamp": 9}])
    await parts.feed.sync_sessions([KEYS[1]], record_docs)
    async with await psycopg.AsyncConnection.connect(parts.dsn) as conn:
        async with conn.transaction():
            await pack(conn, "a")
            await parts.sessions.delete(KEYS[1])
            removing = asyncio.create_task(parts.feed.sync_sessions([KEYS[1]], record_docs))
            await asyncio.sleep(0.2)
            assert not removing.done()
        await removing
    assert await parts.rows_holding("zebracorn") == 0
    assert await parts.rows_holding(str(KEYS[1])) == 0  # no posting names the session (its watermark stays)
    hits = await parts.found()
    assert all(session != str(KEYS[1]) for found in hits for session, _, _ in found)
    assert (await parts.stats())[0] == 0
