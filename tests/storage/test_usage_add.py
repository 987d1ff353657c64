"""A usage write in one call (migration 30) locks its day roll-ups and running totals in byte order whatever the
database's collation: the order of the Python sort an instance from before migration 30 writes them in, so the two
kinds of writer, side by side during an upgrade, never deadlock."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
import pytest
import pytest_asyncio
from psycopg.rows import TupleRow

from agenthub.storage.postgres import open_database
from agenthub.storage.postgres.database import Database
from agenthub.storage.postgres.usage import PostgresUsageStore
from agenthub.storage.usage import UsageRow
from tests.support.postgres import PostgresServer

DAY = "2026-12-05"


@asynccontextmanager
async def own_database(
    server: PostgresServer, options: str = "", *settings: str
) -> AsyncIterator[tuple[Database, str]]:
    """A database of its own: created with `options`, each of `settings` (`name = value`) its default."""
    name = f"t_usage_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" {options}')
        for setting in settings:
            conn.execute(f'ALTER DATABASE "{name}" SET {setting}')
    dsn = server.dsn(name)
    database = await open_database(dsn)
    try:
        yield database, dsn
    finally:
        await database.close()
        server.drop_database(dsn)


@pytest_asyncio.fixture
async def icu_database(postgres_server: PostgresServer) -> AsyncIterator[tuple[Database, str]]:
    """A database whose collation puts "a" before "B" (byte order: "B" first)."""
    async with own_database(postgres_server, "TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'") as made:
        yield made


def row(chat: str) -> UsageRow:
    return UsageRow(DAY, "turn", "default", "http", chat, "alice", "m", input=10, output=5)


@pytest.mark.parametrize(
    ("table", "second", "first"),
    [
        ("usage_days", "chat_id = 'a'", "chat_id = 'B'"),
        ("usage_totals", f"scope = 'chat:http:a' AND period = '{DAY}'", f"scope = 'chat:http:B' AND period = '{DAY}'"),
    ],
)
async def test_a_write_locks_its_rows_in_byte_order_under_a_collation_that_sorts_otherwise(
    icu_database: tuple[Database, str], table: str, second: str, first: str
) -> None:
    database, dsn = icu_database
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as check:
        ordered = await (await check.execute("SELECT 'a' < 'B', 'a' < 'B' COLLATE \"C\"")).fetchone()
        assert ordered == (True, False)  # the database's order is not the bytes'
    store = PostgresUsageStore(database)
    await store.add([row("B"), row("a")])  # both rows exist: the next write updates (locks) them
    async with (
        await psycopg.AsyncConnection.connect(dsn) as holder,
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as probe,
    ):
        await holder.execute(f"SELECT 1 FROM {table} WHERE {second} FOR UPDATE")  # the second in byte order
        write = asyncio.create_task(store.add([row("a"), row("B")]))
        await _until_waiting_for_a_lock(probe)
        with pytest.raises(psycopg.errors.LockNotAvailable):  # the writer took the first before waiting
            await probe.execute(f"SELECT 1 FROM {table} WHERE {first} FOR UPDATE NOWAIT")
        await holder.rollback()
        await asyncio.wait_for(write, 10)
        tokens = await (await probe.execute("SELECT tokens FROM usage_totals WHERE scope = 'agent:default'")).fetchall()
        assert sorted(int(t[0]) for t in tokens) == [60, 60]  # the day's and the month's: both writes counted


async def _until_waiting_for_a_lock(probe: psycopg.AsyncConnection[TupleRow]) -> None:
    for _ in range(500):
        cursor = await probe.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%agenthub_usage_add%'"
        )
        found = await cursor.fetchone()
        if found is not None and int(found[0]) > 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the usage write never waited for the held row")


@pytest.mark.parametrize("digits", [1, 0, -3])
async def test_each_call_is_stored_at_the_time_it_was_sent_whatever_the_server_s_float_output(
    postgres_server: PostgresServer, digits: int
) -> None:
    """`at` reaches `usage_calls` as the float the instance sent (a recovered spool's rows are found by it:
    `unrecorded`), also where the server writes floats with fewer digits than it reads."""
    async with own_database(postgres_server, "", f"extra_float_digits = {digits}") as (database, _):
        store = PostgresUsageStore(database)
        rows = [dataclasses.replace(row(f"c{n}"), at=1_796_000_000.123456 + n / 7) for n in range(20)]
        await store.add(rows)
        assert await store.unrecorded(rows) == []
