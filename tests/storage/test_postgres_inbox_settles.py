"""The shared inbox's settles group-committed: every settle asked for while one is being written goes in the next
statement, so answers ending at the same moment share round trips; each caller still returns once its entry's row
is deleted, and a refused batch is refused to each of its callers."""

from __future__ import annotations

import asyncio

import pytest

from agenthub.errors import StorageError
from agenthub.storage.postgres import PostgresInbox
from agenthub.storage.postgres.database import Database, open_database
from tests.support.postgres import PostgresServer, until_it_works


async def test_twenty_settles_at_the_same_moment_share_round_trips_and_delete_every_entry(database: Database) -> None:
    inbox = PostgresInbox(database, owner="a")
    entries = [await inbox.accept("http", {"n": n}, session=f"default:http:s{n}") for n in range(20)]
    trips = database.latency.count
    await asyncio.gather(*(inbox.settle(entry.id) for entry in entries))
    assert database.latency.count - trips <= 2  # the first alone, the 19 asked for meanwhile together
    assert inbox.depth() == 0
    assert await PostgresInbox(database).count() == 0
    await inbox.settle(entries[0].id)  # settled already: nothing changes
    assert inbox.depth() == 0


async def test_a_settle_the_server_refuses_is_refused_to_its_caller_and_written_once_it_is_back(
    own_postgres_server: PostgresServer,
) -> None:
    database = await open_database(own_postgres_server.dsn(), checkout_timeout_s=1.0)
    try:
        inbox = PostgresInbox(database, owner="a")
        entries = [await inbox.accept("http", {"n": n}) for n in range(3)]
        own_postgres_server.stop()
        results = await asyncio.gather(*(inbox.settle(e.id) for e in entries), return_exceptions=True)
        assert all(isinstance(r, StorageError) for r in results)
        own_postgres_server.start()
        await until_it_works(inbox.retry_settles)
        assert await PostgresInbox(database).count() == 0
    finally:
        await inbox.aclose()
        await database.close()


@pytest.mark.parametrize("settles", [1, 5])
async def test_a_settle_whose_caller_is_cancelled_is_still_written(database: Database, settles: int) -> None:
    inbox = PostgresInbox(database, owner="a")
    entries = [await inbox.accept("http", {"n": n}) for n in range(settles)]
    tasks = [asyncio.create_task(inbox.settle(e.id)) for e in entries]
    await asyncio.sleep(0)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await inbox.aclose()  # waits for the batch being written
    assert await PostgresInbox(database).count() == 0


async def test_a_message_accepted_while_the_settle_before_it_is_written_needs_no_order_check(
    database: Database,
) -> None:
    session = "default:http:next"
    inbox = PostgresInbox(database, owner="a")
    first = await inbox.accept("http", {"n": 1}, session=session)
    async with database.connection("hold the row") as conn, conn.transaction():
        await conn.execute("SELECT 1 FROM inbox WHERE id = %s FOR UPDATE", (first.id,))
        settling = asyncio.create_task(inbox.settle(first.id))  # its DELETE waits for the row
        await asyncio.sleep(0.2)
        second = await inbox.accept("http", {"n": 2}, session=session)
        trips = database.latency.count
        assert await inbox.earlier_unsettled(session, second.id) == []  # the first is answered: no order to keep
        assert database.latency.count == trips
        assert not settling.done()
    await settling
    assert [e.id for e in await inbox.unsettled()] == [second.id]


async def test_accepts_at_the_same_moment_share_round_trips_in_order_and_one_after_its_session_s_other_is_not_alone(
    database: Database,
) -> None:
    inbox = PostgresInbox(database, owner="a")
    trips = database.latency.count
    sessions = [f"default:http:s{n % 10}" for n in range(20)]  # two messages of each session
    entries = await asyncio.gather(*(inbox.accept("http", {"n": n}, session=s) for n, s in enumerate(sessions)))
    assert database.latency.count - trips <= 2
    assert [e.payload["n"] for e in sorted(entries, key=lambda e: e.seq)] == list(range(20))
    assert inbox.depth() == 20
    for n, entry in enumerate(entries):  # the first of each session alone: no order check; the second has one
        later = await inbox.earlier_unsettled(sessions[n], entry.id)
        assert later == ([] if n < 10 else [entries[n - 10].id])
