"""PostgreSQL's running usage totals (migration 17): equal to the sum of the usage rows after many concurrent writers
on three instances and a forget among them; written in the usage write's own transaction (a write whose totals
fail leaves nothing); filled from the rows already there when the migration runs."""

from __future__ import annotations

import asyncio
import random

import psycopg

from agenthub.errors import StorageError
from agenthub.storage.postgres import open_database
from agenthub.storage.postgres.database import Database
from agenthub.storage.postgres.schema import MIGRATIONS, USAGE_TOTALS, apply_migrations
from agenthub.storage.postgres.usage import PostgresUsageStore, totals_of
from agenthub.storage.usage import Claim, Forgotten, Scope, UsageRow, forgotten_tag

DAYS = ("2026-11-30", "2026-12-01", "2026-12-02")  # a month end among them


def random_rows(rng: random.Random, count: int) -> list[UsageRow]:
    return [
        UsageRow(
            rng.choice(DAYS),
            rng.choice(("turn", "summary")),
            rng.choice(("default", "helper")),
            "wecom",
            rng.choice(("g1", "g2", "alice", "bob")),  # a direct chat is named by its person
            rng.choice(("alice", "bob", "carol")),
            "m",
            input=rng.randrange(1, 500),
            output=rng.randrange(0, 90),
            cache_read=rng.randrange(0, 50),
        )
        for _ in range(count)
    ]


async def stored_totals(database: Database) -> dict[tuple[str, str], int]:
    async with database.connection("read the totals") as conn:
        cursor = await conn.execute("SELECT scope, period, tokens FROM usage_totals WHERE tokens <> 0")
        return {(str(r[0]), str(r[1])): int(r[2]) for r in await cursor.fetchall()}


def expected_totals(rows: list[UsageRow]) -> dict[tuple[str, str], int]:
    scopes, periods, tokens = totals_of(rows)
    return {(s, p): t for s, p, t in zip(scopes, periods, tokens, strict=True) if t}


async def test_the_totals_equal_the_usage_rows_after_concurrent_writers_on_three_instances_and_a_forget(
    postgres_dsn: str,
) -> None:
    databases = [await open_database(postgres_dsn) for _ in range(3)]
    stores = [PostgresUsageStore(db) for db in databases]
    rng = random.Random(17)
    batches = [random_rows(rng, rng.randrange(1, 12)) for _ in range(90)]
    tag = forgotten_tag("wecom", "alice")
    try:
        writes = [asyncio.create_task(stores[n % 3].add(batch)) for n, batch in enumerate(batches)]
        while not await stores[1].days("2026-01-01", "2026-12-31"):  # noqa: ASYNC110 (the forget lands among
            await asyncio.sleep(0.005)  # the writes, once some are stored)
        assert await stores[1].forget(Forgotten("wecom", "alice", tag, ("default", "helper"))) > 0
        await asyncio.gather(*writes)
        rows = await stores[2].days("2026-01-01", "2026-12-31")
        assert sum(r.tokens for r in rows) == sum(r.tokens for b in batches for r in b)  # every write landed
        assert await stored_totals(databases[0]) == expected_totals(rows)
        # alice's budget still counts what the forget left under her tag (and her direct chat's, its chat's)
        alice_month = sum(r.tokens for r in rows if r.sender_id in ("alice", tag) and r.day.startswith("2026-12"))
        held = await stores[0].reserve([Claim(Scope("user", "wecom", "alice"), month_limit=alice_month)], DAYS[2], 1, 5)
        assert held.refused is not None and held.refused.used == alice_month
        fits = await stores[0].reserve(
            [Claim(Scope("user", "wecom", "alice"), month_limit=alice_month + 1)], DAYS[2], 1, 5
        )
        assert fits.id is not None
    finally:
        for db in databases:
            await db.close()


async def test_a_write_whose_totals_fail_leaves_no_usage_and_keeps_the_reservation(postgres_dsn: str) -> None:
    """The usage rows, the totals and the end of the turn's reservation are one transaction: a failure between
    them (here a trigger refusing the totals' row, as a full disk or a killed connection would) writes none."""
    database = await open_database(postgres_dsn)
    store = PostgresUsageStore(database)
    alice = [Claim(Scope("user", "wecom", "alice"), day_limit=1000)]
    try:
        held = await store.reserve(alice, DAYS[0], 600, 60.0)
        assert held.id is not None
        async with database.connection("break the totals") as conn:
            await conn.execute(
                "CREATE FUNCTION refuse_totals() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'the totals are away'; END $$"
            )
            await conn.execute(
                "CREATE TRIGGER refuse_totals BEFORE INSERT ON usage_totals "
                "FOR EACH ROW EXECUTE FUNCTION refuse_totals()"
            )
        row = UsageRow(DAYS[0], "turn", "default", "wecom", "g1", "alice", "m", input=500)
        try:
            await store.add([row], release=[held.id])
        except StorageError:
            pass
        else:
            raise AssertionError("the write should have failed")
        assert await store.days("2026-01-01", "2026-12-31") == []
        async with database.connection("count") as conn:
            calls = await (await conn.execute("SELECT count(*) FROM usage_calls")).fetchone()
        assert calls is not None and calls[0] == 0
        tight = [Claim(Scope("user", "wecom", "alice"), day_limit=600)]
        assert (await store.reserve(tight, DAYS[0], 1, 60.0)).refused is not None  # the 600 are still reserved
        async with database.connection("mend the totals") as conn:
            await conn.execute("DROP TRIGGER refuse_totals ON usage_totals")
        await store.add([row], release=[held.id])  # the recorder's retry
        assert await stored_totals(database) == expected_totals([row])
        again = await store.reserve(tight, DAYS[0], 1, 60.0)
        assert again.id is not None and again.standings[0].used == 500  # the usage counted, the reservation gone
    finally:
        await database.close()


async def test_migration_17_fills_the_totals_from_the_rows_already_there(postgres_dsn: str) -> None:
    dsn = postgres_dsn
    rng = random.Random(16)
    rows = random_rows(rng, 200)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        async with conn.transaction():  # the schema as an AgentHub of migration 16 left it
            await conn.execute(
                "CREATE TABLE schema_version (version integer PRIMARY KEY, what text NOT NULL, "
                "applied_at timestamptz NOT NULL DEFAULT now())"
            )
            for migration in MIGRATIONS:
                if migration.version < USAGE_TOTALS.version:
                    for statement in migration.sql:
                        await conn.execute(statement)
                    await conn.execute(
                        "INSERT INTO schema_version (version, what) VALUES (%s, %s)",
                        (migration.version, migration.what),
                    )
        async with conn.cursor() as cursor:
            await cursor.executemany(
                "INSERT INTO usage_days AS d (day, agent, channel, chat_id, sender_id, model, purpose, input, "
                "output, cache_read, cache_write, calls, estimated) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, "
                "%s, 0, 1, 0) ON CONFLICT (day, agent, channel, chat_id, sender_id, model, purpose) DO UPDATE SET "
                "input = d.input + excluded.input, output = d.output + excluded.output, "
                "cache_read = d.cache_read + excluded.cache_read",
                [(r.day, *r.group, r.input, r.output, r.cache_read) for r in rows],
            )
        assert await apply_migrations(conn) == [m.version for m in MIGRATIONS if m.version >= 17]
    database = await open_database(dsn)
    try:
        assert await stored_totals(database) == expected_totals(rows)
    finally:
        await database.close()
