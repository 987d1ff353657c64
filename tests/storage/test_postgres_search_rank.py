"""PostgreSQL's ranking of many sessions: frequent terms summed from each instance's memory give exactly the order
and scores of summing every posting in SQL, and an instance's memory follows what other instances add and remove."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from agenthub.search.shared import record_docs
from agenthub.search.text import query_terms
from agenthub.session_keys import SessionKey
from agenthub.storage.postgres import Database, PostgresSessionStore
from agenthub.storage.postgres.schema import MIGRATIONS, apply_migrations
from agenthub.storage.postgres.search import PostgresSearchIndex
from agenthub.storage.postgres.search_cache import Postings, PostingsCache
from agenthub.storage.postgres.search_pack import pack_pending
from agenthub.storage.postgres.search_sync import PostgresIndexFeed
from agenthub.storage.search_index import SearchHit, SearchScope
from tests.support.postgres import migrated

COMMON = ["budget", "meeting", "invoice", "预算", "会议", "客户"]
RARE = ["nightingale", "夜莺", "CODE-7Q2", "Prius", "老李"]
QUERIES = ["budget meeting", "预算会议 客户", "budget nightingale", "夜莺 预算", "invoice", "客户"]
QUERIES += ["What about the budget?"]
EVERY = SearchScope(None, agent_scoped=lambda _: True)
SOME = SearchScope(None, agent_scoped=lambda channel: channel != "wecom")


def _records(rng: random.Random, start: int, count: int) -> list[dict[str, Any]]:
    records = []
    for i in range(start, start + count):
        words = rng.choices(COMMON, k=rng.randint(1, 6)) + rng.sample(RARE, rng.choice([0, 0, 0, 1]))
        words += ["filler"] * rng.randint(0, 12)  # lengths vary: length normalisation matters
        rng.shuffle(words)
        ts = 1_760_000_000_000 + 1000 * (i // 3)  # some equal times: ties happen
        records.append({"role": ("user", "assistant")[i % 2], "content": " ".join(words), "timestamp": ts})
    return records


def _shown(hits: list[SearchHit]) -> list[tuple[str, str, int, str, float]]:
    return [(h.passage.session, h.passage.kind, h.passage.seq, h.passage.text, round(h.score, 9)) for h in hits]


class Two:
    """Two instances on one database: `cached` sums frequent terms from its memory (a session of more than 30 docs
    too), `plain` sums all in SQL (a session: its docs looked up by id)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.database, self.other = Database(dsn), Database(dsn)
        self.sessions = PostgresSessionStore(self.database)
        self.feed = PostgresIndexFeed(self.database)
        self.cached = PostgresSearchIndex(self.database, cache=PostingsCache(cached_df=20), session_docs=30)
        self.plain = PostgresSearchIndex(self.other, cache=PostingsCache(cached_df=10**9))

    async def catch_up(self) -> None:
        """Index what is behind, then pack half of the pending docs: postings both in blocks and pending."""
        for key in await self.feed.lagging("a"):
            await self.feed.sync_session(key, record_docs)
        async with await psycopg.AsyncConnection.connect(self.dsn) as conn:
            cursor = await conn.execute("SELECT pending FROM search_stats WHERE agent = 'a'")
            row = await cursor.fetchone()
        if row is not None and row[0] > 1:
            assert await pack_pending(self.database, "a", most=row[0] // 2) == row[0] // 2

    async def same(self, limit: int = 8) -> int:
        compared = 0
        for scope in (EVERY, SOME, SearchScope("a:http:chat-0"), SearchScope("a:wecom:chat-2")):
            for query in QUERIES:
                terms = query_terms(query)
                expected = _shown(await self.plain.search("a", terms, scope, limit))
                assert _shown(await self.cached.search("a", terms, scope, limit)) == expected, (query, scope)
                compared += len(expected)
        return compared


@pytest.fixture
async def two(postgres_dsn: str) -> AsyncIterator[Two]:
    parts = Two(migrated(postgres_dsn))
    yield parts
    await parts.database.close()
    await parts.other.close()


async def test_frequent_terms_from_memory_rank_exactly_as_summing_every_posting(two: Two) -> None:
    rng = random.Random(11)
    for s in range(12):
        key = SessionKey("a", ("http", "cli", "wecom")[s % 3], f"chat-{s}")
        for start in range(0, 60, 20):
            await two.sessions.append(key, _records(rng, s * 100 + start, 20))
    await two.catch_up()
    assert await two.same() > 80
    assert two.cached.cache.read > 0 and two.plain.cache.read == 0
    read, two.cached.cache.budget = two.cached.cache.read, 100  # held postings dropped as others are asked
    assert await two.same() > 80
    assert two.cached.cache.read > read


async def test_an_instance_memory_follows_what_others_add_and_remove(two: Two) -> None:
    rng = random.Random(12)
    keys = [SessionKey("a", "http", f"chat-{s}") for s in range(4)]
    for key in keys:
        await two.sessions.append(key, _records(rng, 0, 40))
    await two.catch_up()
    await two.same()
    read = two.cached.cache.read
    await two.sessions.append(keys[0], _records(rng, 40, 10))  # another instance adds: only those are read
    await two.catch_up()
    await two.same()
    assert 0 < two.cached.cache.read - read < 10 * 8
    read = two.cached.cache.read
    # a compaction and a delete remove docs: the memory takes them out (the removal log), reads only the new ones
    await two.sessions.replace(keys[1], _records(rng, 100, 5), archive=[])
    await two.sessions.delete(keys[2])
    await two.catch_up()
    assert await two.same() > 0
    assert two.cached.cache.dropped == 0 and two.cached.cache.read - read <= 5 * 8
    # a rebuild logs no removal: the memory is read again whole, and ranks the same
    read = two.cached.cache.read
    await two.cached.drop_agent("a")
    for key in await two.feed.session_keys("a"):
        await two.feed.sync_session(key, record_docs, full=True)
    assert await two.same() > 0
    assert two.cached.cache.dropped == 1 and two.cached.cache.read - read > 100


async def test_removals_further_back_than_the_log_keeps_read_the_memory_again(two: Two) -> None:
    rng = random.Random(13)
    keys = [SessionKey("a", "http", f"chat-{s}") for s in range(3)]
    for key in keys:
        await two.sessions.append(key, _records(rng, 0, 40))
    await two.catch_up()
    await two.same()
    await two.sessions.replace(keys[0], _records(rng, 50, 5), archive=[])
    await two.catch_up()
    async with await psycopg.AsyncConnection.connect(two.dsn, autocommit=True) as conn:
        await conn.execute("DELETE FROM search_removed")  # as if pruned: the log no longer reaches back
    assert await two.same() > 0
    assert two.cached.cache.dropped == 1


async def test_migration_12_on_a_database_at_10_counts_the_terms_it_holds_and_runs_twice_harmlessly(
    postgres_dsn: str,
) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        await conn.execute(
            "CREATE TABLE schema_version (version integer PRIMARY KEY, what text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for migration in MIGRATIONS:
            if migration.version <= 10:
                for statement in migration.sql:
                    await conn.execute(statement)
                await conn.execute("INSERT INTO schema_version VALUES (%s, %s)", (migration.version, migration.what))
        for doc, terms in enumerate([["apple", "pear"], ["apple"], ["apple", "plum"]], start=1):
            for term in terms:
                await conn.execute(
                    "INSERT INTO search_postings VALUES ('a', %s, %s, 1, 2, NULL, 'a:http:x', 'http')", (term, doc)
                )
        await conn.execute(
            "INSERT INTO search_vectors VALUES ('a', 'a:http:x', 'd1', 'history', 0, 'user', NULL, 1, 't', 'm', '')"
        )
        assert await apply_migrations(conn) == [v for v in (m.version for m in MIGRATIONS) if v > 10]
        cursor = await conn.execute("SELECT term, df FROM search_terms ORDER BY term")
        assert await cursor.fetchall() == [("apple", 3), ("pear", 1), ("plum", 1)]
        cursor = await conn.execute("SELECT count(*) FROM search_vectors WHERE added > 0")
        assert await cursor.fetchone() == (1,)
        for statement in next(m for m in MIGRATIONS if m.version == 12).sql:  # again: nothing changes
            await conn.execute(statement)
        cursor = await conn.execute("SELECT term, df FROM search_terms ORDER BY term")
        assert await cursor.fetchall() == [("apple", 3), ("pear", 1), ("plum", 1)]


async def test_a_start_reads_the_most_frequent_terms_into_memory_and_ranks_the_same(two: Two) -> None:
    rng = random.Random(14)
    for s in range(6):
        await two.sessions.append(SessionKey("a", ("http", "cli")[s % 2], f"chat-{s}"), _records(rng, s * 100, 40))
    await two.catch_up()
    async with await psycopg.AsyncConnection.connect(two.dsn) as conn:
        cursor = await conn.execute("SELECT max(df) FROM search_terms WHERE agent = 'a'")
        row = await cursor.fetchone()
    assert row is not None
    assert await two.cached.preload("a", postings=int(row[0])) == 1  # only as many terms as hold that many postings
    assert await two.cached.preload("a", postings=10**6) > 3
    read = two.cached.cache.read
    assert read > 0
    assert await two.same() > 0
    assert two.cached.cache.read == read  # every frequent term asked was in memory already


class _HeldCache(PostingsCache):
    """Holds its first update of the memory on the worker thread until `go` (a search cancelled meanwhile)."""

    def __init__(self) -> None:
        super().__init__(cached_df=20)
        self.entered, self.go = threading.Event(), threading.Event()
        self.calls = 0

    def _merge(self, *args: Any, **kwargs: Any) -> dict[str, Postings]:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            assert self.go.wait(60)
        return super()._merge(*args, **kwargs)


async def test_a_search_cancelled_while_its_postings_are_joined_leaves_the_memory_whole(two: Two) -> None:
    held = _HeldCache()
    two.cached = PostgresSearchIndex(two.database, cache=held, session_docs=30)
    rng = random.Random(14)
    for s in range(6):
        await two.sessions.append(SessionKey("a", "http", f"chat-{s}"), _records(rng, 0, 40))
    await two.catch_up()
    terms = query_terms("budget meeting")
    first = asyncio.create_task(two.cached.search("a", terms, EVERY, 8))
    assert await asyncio.to_thread(held.entered.wait, 60)
    first.cancel()  # a turn stopped while its search's postings are joined on the worker thread
    second = asyncio.create_task(two.cached.search("a", terms, EVERY, 8))
    await asyncio.sleep(0.3)  # another search meanwhile: it must not read or change the memory being changed
    held.go.set()
    await asyncio.gather(first, second, return_exceptions=True)
    assert first.cancelled()
    assert _shown(second.result()) == _shown(await two.plain.search("a", terms, EVERY, 8))
    assert await two.same() > 0  # no posting held twice
