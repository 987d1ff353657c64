"""The PostgreSQL index follows the writes off the turn: one follower per instance catches every session written
meanwhile up in one batch; a search on another instance finds a message the moment it is stored; an instance
killed between a store and its indexing loses nothing (the next search or start catches up from the tables)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agenthub.search.shared import SharedSearchService
from agenthub.session_keys import SessionKey
from agenthub.storage.postgres import Database, PostgresSessionStore
from agenthub.storage.postgres.search import PostgresSearchIndex
from agenthub.storage.postgres.search_sync import PostgresIndexFeed
from agenthub.storage.search_index import SearchScope
from tests.support.postgres import migrated

EVERY = SearchScope(None, agent_scoped=lambda _: True)


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": 1}


class Instance:
    """One instance's store and search service on the shared database."""

    def __init__(self, dsn: str, delay: float) -> None:
        self.database = Database(dsn)
        self.sessions = PostgresSessionStore(self.database)
        self.feed = PostgresIndexFeed(self.database)
        self.search = SharedSearchService(PostgresSearchIndex(self.database), self.feed, sync_delay_s=delay)

    async def store(self, key: SessionKey, text: str) -> None:
        """An append as the gateway makes it: stored, then its observer told (which never waits)."""
        await self.sessions.append(key, [_user(text)])
        self.search.history_changed("append", key)

    async def found(self, query: str) -> list[str]:
        return [h.passage.text for h in await self.search.search("a", query, EVERY, 5)]

    async def close(self) -> None:
        await self.search.close()
        await self.database.close()


@pytest.fixture
async def dsn(postgres_dsn: str) -> str:
    return migrated(postgres_dsn)


@pytest.fixture
async def pair(dsn: str) -> AsyncIterator[tuple[Instance, Instance]]:
    one, two = Instance(dsn, 0.05), Instance(dsn, 0.05)
    yield one, two
    await one.close()
    await two.close()


async def test_the_follower_catches_every_session_written_meanwhile_up_in_one_batch(
    pair: tuple[Instance, Instance],
) -> None:
    one, _ = pair
    keys = [SessionKey("a", "http", f"chat-{n}") for n in range(5)]
    for n, key in enumerate(keys):
        await one.store(key, f"note number{n} about the harbour")
    assert await one.feed.lagging("a") != []  # nothing indexed on the write's path
    for _ in range(100):
        await asyncio.sleep(0.05)
        if not await one.feed.lagging("a"):
            break
    assert await one.feed.lagging("a") == []
    assert (await one.search.stats("a"))["docs"] == 5
    assert one.search.sessions_read == 5


async def test_a_message_stored_on_one_instance_is_found_at_once_on_another(dsn: str) -> None:
    one, two = Instance(dsn, 60.0), Instance(dsn, 60.0)  # neither follower runs during the test
    try:
        await one.store(SessionKey("a", "http", "desk"), "the launch code is CODE-7Q2")
        assert await two.found("CODE-7Q2") == ["the launch code is CODE-7Q2"]
        await one.store(SessionKey("a", "http", "desk"), "夜莺 is the password")
        assert await two.found("夜莺") == ["夜莺 is the password"]
    finally:
        await one.close()
        await two.close()


async def test_a_kill_between_the_store_and_its_indexing_loses_nothing(dsn: str) -> None:
    killed = Instance(dsn, 60.0)  # its follower would wait a minute: it is killed before
    await killed.store(SessionKey("a", "wecom", "group-1"), "the vault combination is 4815")
    await killed.store(SessionKey("a", "http", "desk"), "nightingale sings at dawn")
    await killed.close()  # the follower cancelled, nothing of it indexed
    started = Instance(dsn, 0.05)
    try:
        assert (await started.search.stats("a"))["docs"] == 0
        assert await started.found("vault combination") == ["the vault combination is 4815"]  # a search catches up
        assert (await started.search.stats("a"))["docs"] == 2
    finally:
        await started.close()
    killed = Instance(dsn, 60.0)
    await killed.store(SessionKey("a", "http", "desk"), "the ferry leaves at noon")
    await killed.close()
    started = Instance(dsn, 0.05)
    try:
        started.search.warm(["a"])  # a start catches every session up, no search asked
        for _ in range(100):
            if (await started.search.stats("a"))["docs"] == 3:
                break
            await asyncio.sleep(0.05)
        assert (await started.search.stats("a"))["docs"] == 3
        assert await started.found("ferry") == ["the ferry leaves at noon"]
    finally:
        await started.close()


async def test_two_instances_catching_one_session_up_in_turn_index_each_record_once(
    pair: tuple[Instance, Instance],
) -> None:
    one, two = pair
    key = SessionKey("a", "http", "shared")
    for n in range(6):
        writer, indexer = (one, two) if n % 2 else (two, one)
        await writer.sessions.append(key, [_user(f"entry{n} of the shared log")])
        await indexer.search.sync_sessions([key])  # each remembers the state it left: the other moved it since
        await indexer.search.sync_sessions([key])  # its own state again: read with it, nothing new
    assert (await one.search.stats("a"))["docs"] == 6
    for n in range(6):
        assert await two.found(f"entry{n}") == [f"entry{n} of the shared log"]
    await one.sessions.replace(key, [_user("only the summary is left")], archive=[])
    await two.search.sync_sessions([key])  # rewritten since `two` last left it: indexed again from the start
    assert (await one.search.stats("a"))["docs"] == 1
    assert await one.found("entry3") == []
