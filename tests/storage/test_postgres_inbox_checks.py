"""The shared inbox's checks before a turn in one round trip: the session's earlier unsettled entries and whether
the turn's entry is still this instance's, that answer serving the `still_mine` right after it, once."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from agenthub.storage.postgres import PostgresInbox
from agenthub.storage.postgres.database import Database, open_database

SESSION = "default:http:ordered"


@pytest_asyncio.fixture
async def database(postgres_dsn: str) -> AsyncIterator[Database]:
    database = await open_database(postgres_dsn)
    try:
        yield database
    finally:
        await database.close()


async def test_the_earlier_entries_and_the_owner_come_in_one_round_trip_and_answer_one_still_mine(
    database: Database,
) -> None:
    a, b = PostgresInbox(database, owner="a"), PostgresInbox(database, owner="b")
    first = await a.accept("http", {"n": 1}, session=SESSION)
    second = await a.accept("http", {"n": 2}, session=SESSION)
    trips = database.latency.count
    assert await a.earlier_unsettled(SESSION, second.id) == [first.id]
    assert await a.still_mine(second.id) is True
    assert database.latency.count == trips + 1  # the owner came with the earlier entries
    assert await b.earlier_unsettled(SESSION, second.id) == [first.id]
    assert await b.still_mine(second.id) is False  # a's entry, seen in b's check
    await a.release(second.id)
    assert await a.still_mine(second.id) is False  # the check answered once: this one asks the database
    assert await a.earlier_unsettled(SESSION, first.id) == []
    assert await a.still_mine(first.id) is True
