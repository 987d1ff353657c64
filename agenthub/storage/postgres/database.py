"""The connection pool to `[store] dsn` and the one place where driver errors become `StorageError` with a fixed
text: never the DSN, never the driver's message (it may name hosts and users)."""

from __future__ import annotations

import asyncio
import select
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
import structlog
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout

from agenthub.errors import StorageError
from agenthub.storage.latency import Latency
from agenthub.storage.postgres.schema import apply_migrations

log = structlog.get_logger(__name__)

UNAVAILABLE = "the database is unavailable"
REFUSED = "the database refused it"
DSN_INVALID = "[store] dsn (AGENTHUB_STORE__DSN) is not a valid PostgreSQL connection string"
CANNOT_CONNECT = (
    "cannot connect to the database of [store] dsn (AGENTHUB_STORE__DSN): check its host, port, user, password "
    "and database name"
)
POOL_MAX = 8
"""Connections an instance's pool opens at most. The turns' statements are short and the busy ones group-commit
(one in flight per kind, the rest together in the next), so a few connections carry them; one more than that adds
a server backend (a fork, its caches warmed and every statement prepared again, mid-burst) and no throughput: three
instances behind a round robin grew 3 x 20 backends on a 2-core box and opened ~36 connections during a 600-turn
burst (8: ~11), at 0.3 ms more daemon CPU a turn; one instance measured the same with 8 as with 20."""
LEASE_LANE_MAX = 2
"""Connections kept apart for lease renewals: a renewal never waits behind the turns' statements for a
connection, so an instance busy with many sessions does not lose its leases to its own pool's queue."""
MAIN, LEASES = "main", "leases"
CONNECT_TIMEOUT_S = 5  # whole seconds: libpq's connect_timeout
CHECKOUT_TIMEOUT_S = 5.0
PREPARE_THRESHOLD = 1
"""A statement is prepared on a connection at its second run there (psycopg's default: its sixth): the turn's
dozen statements run on each of the pool's connections, so most runs then skip the server's parse and plan."""
DEAD_PEER_DETECTION = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 3,
    "keepalives_count": 3,
    "tcp_user_timeout": 20_000,  # ms a sent request may stay unacknowledged
}
"""libpq options: a server that vanished without closing the connection (a network cut, a dead host) is noticed
in about 20 s instead of the kernel's minutes to hours, so a call on it ends in StorageError rather than hanging."""

Pool = AsyncConnectionPool[AsyncConnection[TupleRow]]


class Database:
    """The pool. `open()` migrates the schema and connects (start-up: fails with one clear line); a database that
    was not opened, or whose pool was closed (a `close()`, even one cut short), opens a new pool on its next use.
    `connection(what)` lends one autocommit connection."""

    def __init__(
        self,
        dsn: str,
        *,
        max_size: int = POOL_MAX,
        checkout_timeout_s: float = CHECKOUT_TIMEOUT_S,
        migrate_schema: bool = True,
    ) -> None:
        _check_dsn(dsn)
        self._dsn = dsn
        self._max_size = max_size
        self._checkout_timeout_s = checkout_timeout_s
        self._migrate_schema = migrate_schema
        self._pools: dict[str, Pool] = {}
        self._migrated = not migrate_schema
        self._opening = asyncio.Lock()
        self.latency = Latency()
        """Every `connection()` block, from asking the pool to giving the connection back (for /metrics)."""

    async def open(self, lane: str = MAIN) -> None:
        async with self._opening:
            if self._usable_pool(lane) is None:
                if not self._migrated:
                    await migrate(self._dsn)
                    self._migrated = True
                self._pools[lane] = await self._open_pool(lane)

    def _usable_pool(self, lane: str = MAIN) -> Pool | None:
        """The lane's pool, unless there is none or it is closed (then a new one is opened on the next use)."""
        pool = self._pools.get(lane)
        return None if pool is None or pool.closed else pool

    async def _open_pool(self, lane: str) -> Pool:
        pool: Pool = AsyncConnectionPool(
            self._dsn,
            min_size=1,
            max_size=self._max_size if lane == MAIN else LEASE_LANE_MAX,
            open=False,
            timeout=self._checkout_timeout_s,
            kwargs={
                "autocommit": True,
                "connect_timeout": CONNECT_TIMEOUT_S,
                "prepare_threshold": PREPARE_THRESHOLD,
                **DEAD_PEER_DETECTION,
                **_lane(lane),
            },
            check=still_connected,
            name=f"agenthub-store-{lane}",
        )
        try:
            await pool.open(wait=True, timeout=CONNECT_TIMEOUT_S * 2)
        except PoolTimeout:
            await pool.close()
            raise StorageError(CANNOT_CONNECT) from None
        return pool

    @asynccontextmanager
    async def connection(self, what: str, *, lane: str = MAIN) -> AsyncIterator[AsyncConnection[TupleRow]]:
        """A pooled connection (of `lane`: `LEASES` for lease renewals); any driver failure inside the block is a
        `StorageError("could not <what>: …")`."""
        pool = self._usable_pool(lane)
        if pool is None:
            await self.open(lane)  # StorageError with its own clear line when the server cannot be reached
            pool = self._usable_pool(lane)
            assert pool is not None  # nothing ran between the open and here
        started = time.perf_counter()
        try:
            async with pool.connection() as conn:
                yield conn
        except (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout, PoolClosed, OSError) as e:
            log.warning("store_unavailable", operation=what, error=type(e).__name__, sqlstate=_sqlstate(e))
            raise StorageError(f"could not {what}: {UNAVAILABLE}") from None
        except psycopg.Error as e:
            log.error("store_refused", operation=what, error=type(e).__name__, sqlstate=_sqlstate(e))
            raise StorageError(f"could not {what}: {REFUSED}") from None
        finally:
            self.latency.observe(time.perf_counter() - started)

    async def dedicated(self, *, lane: str = MAIN) -> AsyncConnection[TupleRow]:
        """A connection of its own, outside the pools (a LISTEN; `LEASES`: the renewal lane's, on its own thread);
        the caller closes it. StorageError when the server cannot be reached."""
        try:
            options: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT_S, **DEAD_PEER_DETECTION, **_lane(lane)}
            if lane == LEASES:
                options.update(prepare_threshold=PREPARE_THRESHOLD, application_name="agenthub-lease-lane")
            return await psycopg.AsyncConnection.connect(self._dsn, autocommit=True, **options)
        except (psycopg.Error, OSError):
            raise StorageError(CANNOT_CONNECT) from None

    async def reachable(self) -> bool:
        """True when a round trip to the server succeeds now (for /readyz)."""
        try:
            async with self.connection("check the database") as conn:
                await conn.execute("SELECT 1")
        except StorageError:
            return False
        return True

    async def close(self) -> None:
        """Close the pool; the `Database` lets go of it first, so a close cut short or failing leaves nothing a
        later use would find closed (that use opens a new pool)."""
        async with self._opening:
            pools, self._pools = list(self._pools.values()), {}
            for pool in pools:
                await pool.close()


async def still_connected(conn: AsyncConnection[TupleRow]) -> None:
    """The pool's check on lending a connection, a round trip only when needed: an idle pooled connection that
    has something to read was told something (a server shutting down sends its FATAL, then closes), so it is
    checked with a query (which raises if it is dead; the pool then drops it and lends or opens another).
    Measured: a round-trip check on every loan cost 0.16 ms of CPU per call (0.46 against 0.30 ms an append)."""
    if conn.closed:
        raise psycopg.OperationalError("the connection is closed")
    if _readable(conn.pgconn.socket):
        await AsyncConnectionPool.check_connection(conn)


def _readable(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))


def _lane(lane: str) -> dict[str, str]:
    """The lease lane's renewals do not wait for the WAL flush: a renewal keeps the token (a server crash that loses
    one only ends that lease sooner, and every write is fenced by the token anyway), and on a busy disk the flush
    is what makes a renewal late."""
    return {"options": "-c synchronous_commit=off"} if lane == LEASES else {}


def _sqlstate(error: BaseException) -> str | None:
    return error.sqlstate if isinstance(error, psycopg.Error) else None


def start_up_failure(error: psycopg.Error) -> str:
    """One line for an operator whose database fails at start-up; names the key, never its value. (libpq gives no
    SQLSTATE for a refused connection, and its text is localised: a refused login and a wrong port read alike.)"""
    if (error.sqlstate or "").startswith("42"):
        return "the user of [store] dsn (AGENTHUB_STORE__DSN) may not create AgentHub's tables in that database"
    return CANNOT_CONNECT


async def migrate(dsn: str) -> list[int]:
    """Connect once and bring the schema up to date; the versions applied. StorageError with one clear line."""
    _check_dsn(dsn)
    try:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as c:
            return await apply_migrations(c)
    except psycopg.Error as e:
        log.error("store_start_failed", error=type(e).__name__, sqlstate=e.sqlstate)
        raise StorageError(start_up_failure(e)) from None
    except OSError:
        raise StorageError(CANNOT_CONNECT) from None


async def open_database(dsn: str, **options: Any) -> Database:
    """A `Database` on `dsn` (`options` as `Database` takes them), migrated and connected; StorageError with one
    clear line when it cannot be."""
    database = Database(dsn, **options)
    await database.open()
    return database


def _check_dsn(dsn: str) -> None:
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        raise StorageError(DSN_INVALID) from None
