"""The renewal lane on PostgreSQL: held leases renewed on a thread and a connection of their own, so a starved main
loop does not let them lapse; a lane cut off from the database gives them up in time (fail closed), one whose
connection was killed reconnects; closing it leaves no thread and no connection behind."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import random
import threading
import time
from collections.abc import AsyncIterator, Mapping, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import pytest_asyncio
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from structlog.testing import capture_logs

from agenthub.storage.lease import LeaseKeeper
from agenthub.storage.postgres import Database, PostgresLeases
from tests.support.postgres import PostgresServer, hung

TTL_S = 3.0
NAME = "instance:lane-test"
LANE_APP = "agenthub-lease-lane"


@pytest_asyncio.fixture
async def leases(postgres_dsn: str) -> AsyncIterator[PostgresLeases]:
    database = Database(postgres_dsn)
    await database.open()
    store = PostgresLeases(database)
    try:
        yield store
    finally:
        await store.close()
        await database.close()


async def expires_in_s(dsn: str, name: str = NAME) -> float:
    """How long the lease row has left by the database's clock (negative: expired)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT extract(epoch FROM expires_at - clock_timestamp())::float8 FROM leases WHERE name = %s", (name,)
        )
        row = await cursor.fetchone()
    assert row is not None
    return float(row[0])


async def lane_backends(dsn: str) -> list[int]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND datname = %s",
            (LANE_APP, conninfo_to_dict(dsn)["dbname"]),
        )
        return [int(row[0]) for row in await cursor.fetchall()]


async def kill_lane_connection(dsn: str) -> None:
    pids = await lane_backends(dsn)
    assert pids, "the lane has no connection to kill"
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for pid in pids:
            await conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


def lane_threads(other: frozenset[threading.Thread] = frozenset()) -> list[str]:
    """The lane threads alive now, leaving out `other` (those of stores other tests left open)."""
    return [t.name for t in threading.enumerate() if t.name.startswith("lease-lane") and t not in other]


def threads_now() -> frozenset[threading.Thread]:
    return frozenset(threading.enumerate())


@asynccontextmanager
async def started_keeper(store: PostgresLeases, lost: list[float]) -> AsyncIterator[LeaseKeeper]:
    keeper = LeaseKeeper(store, NAME, "lane-test", ttl_s=TTL_S, on_lost=lambda: lost.append(time.monotonic()))
    await keeper.step()
    assert keeper.held
    keeper.start()
    try:
        yield keeper
    finally:
        await keeper.stop()


async def test_a_lease_stays_renewed_in_the_database_while_the_main_loop_is_blocked_longer_than_the_lease(
    leases: PostgresLeases, postgres_dsn: str
) -> None:
    lost: list[float] = []
    async with started_keeper(leases, lost) as keeper:
        assert keeper.lease is not None
        token = keeper.lease.token
        time.sleep(TTL_S * 1.5)  # noqa: ASYNC251 - the point: the loop gets no turn for longer than the lease lasts
        assert keeper.held, "given up while the loop was blocked"
        assert await expires_in_s(postgres_dsn) > TTL_S / 3  # renewed by the lane meanwhile, not lapsed
        await asyncio.sleep(0.2)  # whatever the lane reported meanwhile has arrived
        assert lost == []
        assert keeper.lease is not None and keeper.lease.token == token  # the same hold all along


async def test_a_lane_whose_connection_was_killed_reconnects_and_keeps_the_lease(
    leases: PostgresLeases, postgres_dsn: str
) -> None:
    lost: list[float] = []
    async with started_keeper(leases, lost) as keeper:
        await asyncio.sleep(TTL_S / 3)  # a renewal or two: the lane is connected
        before = await lane_backends(postgres_dsn)
        await kill_lane_connection(postgres_dsn)
        await asyncio.sleep(TTL_S * 1.5)
        assert lost == [] and keeper.held
        assert await expires_in_s(postgres_dsn) > TTL_S / 3
        after = await lane_backends(postgres_dsn)
        assert after and set(after).isdisjoint(before)  # a new connection


async def test_a_lane_cut_off_from_the_database_gives_the_lease_up_before_it_expires_and_the_owner_hears_it(
    leases: PostgresLeases, postgres_dsn: str
) -> None:
    """Fail closed: no renewal gets through, so the owner is told the lease is lost while the database still
    has it live for a while (the owner's stop has that long before a standby can take the lease)."""
    lost: list[float] = []
    async with started_keeper(leases, lost) as keeper:
        await asyncio.sleep(TTL_S / 3)
        dbname = conninfo_to_dict(postgres_dsn)["dbname"]
        server = make_conninfo(postgres_dsn, dbname="postgres")  # a database may not refuse its own sessions
        async with await psycopg.AsyncConnection.connect(server, autocommit=True) as admin:
            await admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS false')
            try:
                await admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = %s AND datname = %s",
                    (LANE_APP, dbname),
                )
                cut_at = time.monotonic()
                async with asyncio.timeout(TTL_S * 2):
                    while not lost:  # noqa: ASYNC110 - a plain list the keeper's callback appends to
                        await asyncio.sleep(0.02)
                left = await left_in_pool(leases)  # the pool's connections were open before the cut
            finally:
                await admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')
        assert not keeper.held and keeper.lease is None
        assert lost[0] - cut_at < TTL_S
        assert left > 0, "the owner heard of the loss only after the lease had expired in the database"


async def left_in_pool(store: PostgresLeases) -> float:
    async with store.database.connection("read the lease") as conn:
        cursor = await conn.execute(
            "SELECT extract(epoch FROM expires_at - clock_timestamp())::float8 FROM leases WHERE name = %s", (NAME,)
        )
        row = await cursor.fetchone()
    assert row is not None
    return float(row[0])


async def test_closing_the_store_ends_the_lane_thread_and_its_connection(postgres_dsn: str) -> None:
    database = Database(postgres_dsn)
    store = PostgresLeases(database)
    lost: list[float] = []
    other = threads_now()
    async with started_keeper(store, lost):
        await asyncio.sleep(TTL_S / 3)
        assert lane_threads(other) and await lane_backends(postgres_dsn)
    await store.close()
    await database.close()
    assert lane_threads(other) == []
    async with asyncio.timeout(5):  # the server notices the closed connection at once; its row may lag a moment
        while await lane_backends(postgres_dsn):  # noqa: ASYNC110 - the server's view, nothing to wait on
            await asyncio.sleep(0.05)


async def test_a_lane_whose_database_hangs_gives_the_lease_up_in_time_and_closes_at_once(
    own_postgres_server: PostgresServer,
) -> None:
    """The database stops answering (its processes stopped: connections stay open). The lane gives the lease up
    before it expires and drops the request's connection without waiting for the server to cancel it (the
    driver's cancel waits up to 10 s, with every other lease of the lane behind it): it closes at once."""
    database = Database(own_postgres_server.dsn())
    store = PostgresLeases(database)
    lost: list[float] = []
    other = threads_now()
    try:
        async with started_keeper(store, lost) as keeper:
            await asyncio.sleep(TTL_S / 3)  # the lane is connected
            with hung(own_postgres_server):
                cut_at = time.monotonic()
                async with asyncio.timeout(TTL_S * 2):
                    while not lost:  # noqa: ASYNC110 - a plain list the keeper's callback appends to
                        await asyncio.sleep(0.02)
                assert not keeper.held and lost[0] - cut_at < TTL_S
                closing = time.monotonic()
                await store.close()
                assert time.monotonic() - closing < 2.0, "the lane waited for the hung server"
                assert lane_threads(other) == []
    finally:
        await store.close()
        await database.close()


IDLE_S = 0.3


async def test_an_idle_lane_ends_its_thread_and_connection_and_a_lease_kept_afterwards_starts_it_again(
    postgres_dsn: str,
) -> None:
    """A store nobody closes: once no lease has been kept for `lane_idle_s`, the lane's thread ends and its
    connection is closed; the next lease kept starts them again and is renewed."""
    database = Database(postgres_dsn)
    store = PostgresLeases(database, lane_idle_s=IDLE_S)
    lost: list[float] = []
    other = threads_now()
    try:
        async with started_keeper(store, lost):
            await asyncio.sleep(TTL_S / 3)
            assert lane_threads(other) and await lane_backends(postgres_dsn)
        await gone(postgres_dsn, other)
        async with started_keeper(store, lost) as keeper:
            assert lane_threads(other)
            renewals = store.renewal_lane().renewals
            await asyncio.sleep(TTL_S / 3)
            assert store.renewal_lane().renewals > renewals
            assert keeper.held and await expires_in_s(postgres_dsn) > TTL_S * 2 / 3
            assert len(lost) == 1  # the first keeper's stop: this one's lease was never lost
    finally:
        await store.close()
        await database.close()


async def test_leases_kept_while_an_idle_lane_is_ending_are_renewed_all_the_same(postgres_dsn: str) -> None:
    """A lease kept at any moment of an idle lane's ending (its connection being closed, its thread leaving) is
    renewed: by the ending thread, which then stays, or by a new one; none is lost, no thread is left over."""
    ttl_s, idle_s = 1.2, 0.05
    database = Database(postgres_dsn)
    store = PostgresLeases(database, lane_idle_s=idle_s)
    other = threads_now()
    lost: list[str] = []
    rng = random.Random(7)
    try:
        for n in range(16):
            lease = await store.acquire(f"race-{n}", "lane-test", ttl_s)
            assert lease is not None
            lane = store.renewal_lane()
            renewals = lane.renewals
            kept = lane.keep(lease, ttl_s, functools.partial(lost.append, f"race-{n}"))
            async with asyncio.timeout(ttl_s / 2):
                while kept.lease.token == lease.token and kept.lease.expires_at == lease.expires_at:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
            assert lane.renewals > renewals and not kept.lost
            lane.drop(kept)
            await asyncio.sleep(idle_s * rng.uniform(0.5, 1.5))  # around the moment the idle lane ends
        assert lost == []
        await gone(postgres_dsn, other)
    finally:
        await store.close()
        await database.close()


async def gone(dsn: str, other: frozenset[threading.Thread]) -> None:
    """Until the lane has no thread and no connection (an idle one ends both)."""
    async with asyncio.timeout(IDLE_S + 5):
        while lane_threads(other) or await lane_backends(dsn):  # noqa: ASYNC110 - threads and the server's view
            await asyncio.sleep(0.05)


async def test_a_thread_leaving_idle_never_closes_the_connection_of_the_thread_started_after_it(
    postgres_dsn: str,
) -> None:
    """The idle thread gives its place up, and a lease kept right then starts a new thread, which connects: the
    leaving thread, held up at that moment (here: in its log line), must not close the new thread's connection
    on its way out (a renewal in flight on it would fail, or hang until the lease is given up)."""
    ttl_s, idle_s = 3.0, 0.05
    database = Database(postgres_dsn)
    await database.open()
    store = PostgresLeases(database, lane_idle_s=idle_s)
    paused, resume = threading.Event(), threading.Event()

    def hold_up_the_leaving_thread(logger: object, method: str, event: MutableMapping[str, Any]) -> Mapping[str, Any]:
        if event["event"] == "lease_lane_idle_ended" and not paused.is_set():
            paused.set()
            resume.wait(5)  # on the leaving thread: after it gave its place up, before it has left
        elif event["event"] == "lease_lane_connected" and paused.is_set():
            resume.set()  # on the new thread: its connection is open
        return event

    lost: list[str] = []
    try:
        with capture_logs(processors=[hold_up_the_leaving_thread]) as logs:
            first = await store.acquire("idle-leaving-1", "lane-test", ttl_s)
            assert first is not None
            lane = store.renewal_lane()
            kept = lane.keep(
                dataclasses.replace(first, expires_at=first.expires_at - ttl_s / 6),
                ttl_s,
                functools.partial(lost.append, "idle-leaving-1"),
            )
            async with asyncio.timeout(ttl_s):
                while lane.renewals == 0:  # noqa: ASYNC110 - a counter the lane's thread moves
                    await asyncio.sleep(0.01)
            lane.drop(kept)
            async with asyncio.timeout(5):
                while not paused.is_set():  # noqa: ASYNC110 - set by the lane's thread
                    await asyncio.sleep(0.01)
            second = await store.acquire("idle-leaving-2", "lane-test", ttl_s)
            assert second is not None
            due = dataclasses.replace(second, expires_at=second.expires_at - ttl_s / 6)  # renewed at once
            kept = lane.keep(due, ttl_s, functools.partial(lost.append, "idle-leaving-2"))
            await asyncio.sleep(ttl_s / 2)
            assert not kept.lost and lost == []
            assert kept.lease.expires_at > due.expires_at  # renewed
            events = [e["event"] for e in logs]
            assert "lease_lane_store_unavailable" not in events, "the new thread's connection was closed under it"
            assert events.count("lease_lane_connected") == 2  # the first thread's, then the new one's: no reconnect
    finally:
        resume.set()
        await store.close()
        await database.close()
