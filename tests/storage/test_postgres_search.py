"""The shared search index on PostgreSQL: sessions caught up from the history tables up to a watermark, rewrites
indexed again, BM25 and the port's order in SQL, the scope a filter of the query, and nothing of a dropped text
left in any table."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agenthub.search.docs import memory_docs
from agenthub.search.shared import record_docs
from agenthub.search.text import query_terms
from agenthub.session_keys import SessionKey
from agenthub.storage.postgres import Database, PostgresSessionStore
from agenthub.storage.postgres.search import PostgresSearchIndex
from agenthub.storage.postgres.search_pack import pack_pending
from agenthub.storage.postgres.search_sync import PostgresIndexFeed
from agenthub.storage.search_index import MEMORY, SearchScope, SourceRef, idf, score_of, term_score
from tests.support.postgres import migrated, rows_holding

KEY = SessionKey("a", "http", "one")
OTHER = SessionKey("a", "wecom", "two")
INDEX_TABLES = ("search_docs", "search_blocks", "search_sources", "search_terms", "search_names")


def _user(text: str, ts: int = 1) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": ts}


class Parts:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.database = Database(dsn)
        self.sessions = PostgresSessionStore(self.database)
        self.index = PostgresSearchIndex(self.database)
        self.feed = PostgresIndexFeed(self.database)

    async def catch_up(self, agent: str = "a") -> None:
        """Index what is behind and pack it (a removal then takes postings out of their blocks)."""
        for key in await self.feed.lagging(agent):
            await self.feed.sync_session(key, record_docs)
        await pack_pending(self.database, agent)

    async def texts(self, query: str, scope: SearchScope, limit: int = 10) -> list[str]:
        return [hit.passage.text for hit in await self.index.search("a", query.split(), scope, limit)]

    async def rows_holding(self, text: str) -> int:
        """Rows of the index tables where `text` appears in any column."""
        return await rows_holding(self.dsn, text, (*INDEX_TABLES, "search_stats"))


@pytest.fixture
async def parts(postgres_dsn: str) -> AsyncIterator[Parts]:
    p = Parts(migrated(postgres_dsn))
    yield p
    await p.database.close()


async def test_appends_are_indexed_from_the_watermark_and_ranked_by_the_port_formula(parts: Parts) -> None:
    await parts.sessions.append(KEY, [_user("apple banana", 100), _user("apple cherry cherry", 200)])
    await parts.sessions.append(KEY, [_user("apple", 300)])
    assert await parts.feed.lagging("a") == [KEY]
    assert await parts.feed.sync_session(KEY, record_docs) == 3
    assert await parts.feed.lagging("a") == []
    await parts.sessions.append(KEY, [_user("banana split", 400)])
    assert await parts.feed.lagging("a") == [KEY]
    assert await parts.feed.sync_session(KEY, record_docs) == 1  # only the new one
    assert await parts.feed.sync_session(KEY, record_docs) == 0

    hits = await parts.index.search("a", ["cherri", "appl"], SearchScope(str(KEY)), 10)  # stemmed terms
    assert [h.passage.text for h in hits] == ["apple cherry cherry", "apple", "apple banana"]
    n, avgdl = 4, (2 + 3 + 1 + 2) / 4  # N and the average length over every doc of the agent

    def expected(ts: int, *parts: tuple[int, int, int]) -> float:
        bm25 = sum(term_score(idf(n, df), tf, dl, avgdl) for tf, df, dl in parts)
        return score_of(bm25, ts, 100, 400)

    assert math.isclose(hits[0].score, expected(200, (1, 3, 3), (2, 1, 3)), rel_tol=1e-12)
    assert math.isclose(hits[1].score, expected(300, (1, 3, 1)), rel_tol=1e-12)
    assert hits[1].before is not None and hits[1].before.text == "apple cherry cherry"
    assert hits[1].after is not None and hits[1].after.text == "banana split"


async def test_a_replace_a_clear_and_a_delete_are_indexed_again_with_no_stale_copy(parts: Parts) -> None:
    await parts.sessions.append(KEY, [_user("old words here", 1), _user("kept tail", 2)])
    await parts.catch_up()
    await parts.sessions.replace(KEY, [_user("kept tail", 2)], archive=[_user("old words here", 1)])
    assert await parts.feed.lagging("a") == [KEY]
    await parts.catch_up()
    hits = await parts.index.search("a", ["old", "kept"], SearchScope(str(KEY)), 10)
    assert sorted((h.passage.kind, h.passage.text) for h in hits) == [
        ("archive", "old words here"),
        ("history", "kept tail"),
    ]
    await parts.sessions.clear(KEY, archive=[_user("kept tail", 2)])
    await parts.sessions.append(KEY, [_user("fresh start", 3), _user("second", 4), _user("third", 5)])
    await parts.catch_up()
    assert sorted(await parts.texts("kept fresh old", SearchScope(str(KEY)))) == [
        "fresh start",
        "kept tail",
        "old words here",
    ]
    assert (await parts.index.stats("a"))["docs"] == 5  # archive 2, history 3: no stale copy
    await parts.sessions.delete(KEY)
    assert await parts.feed.lagging("a") == [KEY]
    await parts.catch_up()
    assert await parts.rows_holding("fresh") == 0 and await parts.rows_holding("old words") == 0
    assert (await parts.index.stats("a"))["docs"] == 0


async def test_the_scope_sees_its_session_or_its_channels_and_only_the_memory_named(parts: Parts) -> None:
    await parts.sessions.append(KEY, [_user("secret alpha")])
    await parts.sessions.append(OTHER, [_user("secret beta")])
    await parts.catch_up()
    mem = SourceRef(MEMORY, "", "auth/USER.md")
    assert await parts.feed.sync_memory("a", mem, "secret gamma\n\nother line", 5, memory_docs)
    assert not await parts.feed.sync_memory("a", mem, "secret gamma\n\nother line", 5, memory_docs)
    assert await parts.texts("secret", SearchScope(str(KEY))) == ["secret alpha"]
    http_only = SearchScope(None, (mem.name,), agent_scoped=lambda channel: channel == "http")
    assert sorted(await parts.texts("secret", http_only)) == ["secret alpha", "secret gamma"]
    assert await parts.texts("secret", SearchScope(None, agent_scoped=lambda c: c == "wecom")) == ["secret beta"]
    assert await parts.texts("secret", SearchScope(None)) == []
    await parts.feed.sync_memory("a", mem, "changed", 6, memory_docs)
    assert await parts.texts("secret", SearchScope(None, (mem.name,))) == []
    await parts.feed.sync_memory("a", mem, None, None, memory_docs)
    assert await parts.rows_holding("changed") == 0


async def test_the_port_writes_replace_drop_and_keep_the_watermark(parts: Parts) -> None:
    source = SourceRef("history", str(KEY))
    docs, _ = record_docs(source, [(0, _user("one two", 1)), (1, _user("two three", 2))], 0, [])
    await parts.index.add("a", source, docs, "w1")
    redo, _ = record_docs(source, [(1, _user("two four", 2))], 0, [])
    await parts.index.add("a", source, redo, "w2")  # the same seq replaces its doc
    assert sorted(await parts.texts("two", SearchScope(str(KEY)))) == ["one two", "two four"]
    assert await parts.index.watermarks("a") == {source: "w2"}
    await parts.index.replace_source("a", source, redo, "w3")
    assert await parts.texts("two", SearchScope(str(KEY))) == ["two four"]
    await parts.index.drop_session("a", str(KEY))
    assert await parts.index.watermarks("a") == {}
    assert await parts.index.stats("a") == {"docs": 0, "terms": 0, "sources": 0}


async def test_query_text_is_data_never_syntax(parts: Parts) -> None:
    odd = '\'); DROP TABLE search_docs; -- "x" * AND NEAR ( ) : %s \x01'
    await parts.sessions.append(KEY, [_user(odd)])
    await parts.catch_up()
    hits = await parts.index.search("a", query_terms(odd), SearchScope(str(KEY)), 5)
    assert [h.passage.text for h in hits] == [odd.strip()]
