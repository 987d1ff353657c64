"""`PostgresLeases`: the `LeaseStore` shared by every instance, one row per lease name. Expiry is judged by the
database's `now()` (the instances' clocks differ); a grant to a new holder raises the fencing token."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import psycopg
import structlog
from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from agenthub.clock import Clock, monotonic_clock
from agenthub.errors import StorageError
from agenthub.storage.lease import FREED, WANTED, Lease
from agenthub.storage.lease_lane import IDLE_S as LANE_IDLE_S
from agenthub.storage.lease_lane import RenewalLane
from agenthub.storage.postgres.database import LEASES, UNAVAILABLE, Database

WANTED_CHANNEL, FREED_CHANNEL = "agenthub_lease_wanted", "agenthub_lease_freed"
LISTEN_RETRY_S = 1.0

_ACQUIRE = """
INSERT INTO leases AS l (name, holder, token, expires_at)
VALUES (%(name)s, %(holder)s, 1, now() + %(ttl)s * interval '1 second')
ON CONFLICT (name) DO UPDATE SET
    holder = EXCLUDED.holder,
    token = CASE WHEN l.holder = EXCLUDED.holder AND l.expires_at > now() THEN l.token ELSE l.token + 1 END,
    expires_at = EXCLUDED.expires_at,
    asked = false
WHERE l.expires_at <= now() OR l.holder = EXCLUDED.holder
RETURNING token"""
"""One statement: free, expired or already the holder's → granted (renewed, same token, when still live; nobody
has asked for it yet: `asked` cleared); the row lock of ON CONFLICT makes contenders at the same moment wait for
each other, so exactly one wins (a refused one keeps the lock to the end of its transaction)."""

_RENEW = """
UPDATE leases SET expires_at = now() + %(ttl)s * interval '1 second'
WHERE name = %(name)s AND holder = %(holder)s AND token = %(token)s AND expires_at > clock_timestamp()
RETURNING token
"""
"""`clock_timestamp()`, not `now()`: a renewal that waited for the row lock of a release re-checks the released
row against the time after the wait; against its own start time (`now()`, earlier than the release's) it would
find the lease live and extend a released lease, which then keeps every other instance out for `ttl`."""
_RENEW_MANY = """
WITH r AS (
    SELECT * FROM unnest(%(names)s::text[], %(holders)s::text[], %(tokens)s::bigint[]) AS r(name, holder, token)
),
locked AS MATERIALIZED (
    SELECT l.name FROM leases AS l WHERE l.name IN (SELECT name FROM r) ORDER BY l.name COLLATE "C" FOR UPDATE OF l
)
UPDATE leases AS l SET expires_at = now() + %(ttl)s * interval '1 second'
FROM r
WHERE l.name = r.name AND l.holder = r.holder AND l.token = r.token AND l.expires_at > clock_timestamp()
  AND (SELECT count(*) FROM locked) >= 0
RETURNING l.name
"""
"""Every lease of the list in one statement (an instance's leases): the names renewed. The rows are locked in name
order first (`locked`, evaluated once before any row is updated), the order the let-gos of several sessions
(`let_go.py`) lock them in: code-point order, as Python sorts them, so `COLLATE "C"` whatever the database's own
collation (en_US or zh_CN put "alice" before "Bob"). The UPDATE alone would lock them in the order its plan scans
the table, and a renewal of leases being let go at that moment could then wait for the let-go while it waits for
the renewal."""
_RELEASE = f"""
WITH freed AS (
    UPDATE leases SET expires_at = now() WHERE name = %(name)s AND token = %(token)s AND expires_at > now()
    RETURNING name, asked
)
SELECT pg_notify('{FREED_CHANNEL}', name) FROM freed WHERE asked
"""
"""The row stays (expired): the next grant's token is still higher than every earlier one. Whoever waits for
the lease (it asked for it: `asked`, migration 27) hears at once that it is free; nobody else is told."""
_ACQUIRE_OR_ASK = "SELECT agenthub_lease_acquire_or_ask(%(name)s, %(holder)s, %(ttl)s::double precision)"
"""`_ACQUIRE`, and when it is not granted (a NULL token) the lease marked asked for (its release is then
announced) and its holder asked for it, in the same round trip (migration 27)."""


log = structlog.get_logger(__name__)


class PostgresLeases:
    """Leases in the table `leases`. `Lease.expires_at` is on this instance's `clock`, counted from before the
    request was sent, so it never ends later by our clock than the database's grant does by its own."""

    def __init__(self, database: Database, *, clock: Clock = monotonic_clock, lane_idle_s: float = LANE_IDLE_S) -> None:
        """`lane_idle_s`: how long the renewal lane keeps its thread and connection without a lease to renew."""
        self.database = database
        self._clock = clock
        self._lane_idle_s = lane_idle_s
        self._lane: RenewalLane | None = None

    def renewal_lane(self) -> RenewalLane:
        """The lane that renews this instance's held leases on a thread and a connection of its own (started with
        the first lease it keeps, ended after `lane_idle_s` without one and started again by the next; a new
        lane after `close`)."""
        if self._lane is None or self._lane.closed:
            self._lane = RenewalLane(self._open_link, clock=self._clock, name="postgres", idle_s=self._lane_idle_s)
        return self._lane

    async def _open_link(self) -> LaneLink:
        return LaneLink(await self.database.dedicated(lane=LEASES), self._clock)

    async def close(self) -> None:
        """End the renewal lane (its thread and connection)."""
        lane, self._lane = self._lane, None
        if lane is not None:
            await lane.close()

    async def acquire(self, name: str, holder: str, ttl_s: float) -> Lease | None:
        sent_at = self._clock()
        async with self.database.connection("acquire a lease") as conn:
            cursor = await conn.execute(_ACQUIRE, {"name": name, "holder": holder, "ttl": ttl_s})
            row = await cursor.fetchone()
        return None if row is None else Lease(name, holder, int(row[0]), sent_at + ttl_s)

    async def renew(self, lease: Lease, ttl_s: float) -> Lease | None:
        sent_at = self._clock()
        params = {"name": lease.name, "holder": lease.holder, "token": lease.token, "ttl": ttl_s}
        async with self.database.connection("renew a lease", lane=LEASES) as conn:
            cursor = await conn.execute(_RENEW, params)
            row = await cursor.fetchone()
        return None if row is None else Lease(lease.name, lease.holder, lease.token, sent_at + ttl_s)

    async def renew_many(self, leases: list[Lease], ttl_s: float) -> list[Lease | None]:
        if not leases:
            return []
        sent_at = self._clock()
        async with self.database.connection("renew the leases", lane=LEASES) as conn:
            renewed = await _renew_many(conn, leases, ttl_s)
        return _renewed(leases, renewed, sent_at + ttl_s)

    async def release(self, lease: Lease) -> None:
        async with self.database.connection("release a lease") as conn:
            await conn.execute(_RELEASE, {"name": lease.name, "token": lease.token})

    async def acquire_or_ask(self, name: str, holder: str, ttl_s: float) -> Lease | None:
        sent_at = self._clock()
        async with self.database.connection("acquire a lease") as conn:
            cursor = await conn.execute(_ACQUIRE_OR_ASK, {"name": name, "holder": holder, "ttl": ttl_s})
            row = await cursor.fetchone()
        return None if row is None or row[0] is None else Lease(name, holder, int(row[0]), sent_at + ttl_s)

    async def listen(self, on_signal: Callable[[str, str], None]) -> None:
        kinds = {WANTED_CHANNEL: WANTED, FREED_CHANNEL: FREED}
        while True:
            try:
                async with await self.database.dedicated() as conn:
                    for channel in kinds:
                        await conn.execute(f"LISTEN {channel}")
                    async for notice in conn.notifies():
                        on_signal(kinds[notice.channel], notice.payload)
            except (psycopg.Error, OSError, StorageError) as e:
                log.warning("lease_signals_lost", error=type(e).__name__)
            await asyncio.sleep(LISTEN_RETRY_S)

    async def live_holders(self, prefix: str) -> list[str]:
        """The holders of the leases named `prefix…` that are live now (by the database's clock)."""
        async with self.database.connection("list the live leases") as conn:
            cursor = await conn.execute(
                "SELECT holder FROM leases WHERE starts_with(name, %(prefix)s) AND expires_at > now() ORDER BY holder",
                {"prefix": prefix},
            )
            rows = await cursor.fetchall()
        return [str(row[0]) for row in rows]


class LaneLink:
    """The renewal lane's own connection (outside the pools, whose connections belong to the main loop)."""

    def __init__(self, conn: AsyncConnection[TupleRow], clock: Clock) -> None:
        self._conn, self._clock = conn, clock

    async def renew_many(self, leases: list[Lease], ttl_s: float) -> list[Lease | None]:
        sent_at = self._clock()
        try:
            renewed = await _renew_many(self._conn, leases, ttl_s)
        except (psycopg.Error, OSError) as e:
            log.warning("store_unavailable", operation="renew the leases", error=type(e).__name__)
            raise StorageError(f"could not renew the leases: {UNAVAILABLE}") from None
        return _renewed(leases, renewed, sent_at + ttl_s)

    async def close(self) -> None:
        await self._conn.close()  # psycopg closes the socket at once, with nothing sent or awaited


async def _renew_many(conn: AsyncConnection[TupleRow], leases: list[Lease], ttl_s: float) -> set[str]:
    """The names of `leases` renewed, in one statement; the rows locked in name order (as every instance does)."""
    ordered = sorted(leases, key=lambda lease: lease.name)
    params = {
        "names": [lease.name for lease in ordered],
        "holders": [lease.holder for lease in ordered],
        "tokens": [lease.token for lease in ordered],
        "ttl": ttl_s,
    }
    cursor = await conn.execute(_RENEW_MANY, params)
    return {str(row[0]) for row in await cursor.fetchall()}


def _renewed(leases: list[Lease], renewed: set[str], expires_at: float) -> list[Lease | None]:
    return [
        Lease(lease.name, lease.holder, lease.token, expires_at) if lease.name in renewed else None for lease in leases
    ]
