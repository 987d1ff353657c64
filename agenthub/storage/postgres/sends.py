"""`PostgresMemberSends`: the per-member send counts of one sender (a WeCom app) in table `member_sends`, shared by
every instance; a send is counted under the member's advisory lock on the database's clock, so instances behind
one load balancer together never go over the windows."""

from __future__ import annotations

import time

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from agenthub.storage.member_sends import Windows, waits_for
from agenthub.storage.postgres.database import Database

_NOW = "SELECT extract(epoch FROM clock_timestamp())::float8"
_AGES = (
    "SELECT %(now)s - sent_at FROM member_sends WHERE scope = %(scope)s AND member = %(member)s "
    "AND sent_at > %(now)s - %(span)s ORDER BY sent_at, seq"
)


class PostgresMemberSends:
    """The counts of `scope` (e.g. `wecom/app-hr`) in `windows`; rows that left every window are deleted as sends
    are counted (a whole scope's at most once per longest window, per instance)."""

    def __init__(self, database: Database, scope: str, windows: Windows) -> None:
        self.database = database
        self.scope = scope
        self.windows = windows
        self._span = max(w for w, _ in windows)
        self._last_sweep = 0.0

    async def waits(self, member: str, count: int) -> list[float]:
        async with self.database.connection("read a member's sends") as conn:
            ages = await self._ages(conn, member, await _now(conn))
        return waits_for(ages, self.windows, count)

    async def take(self, member: str) -> float:
        sweep = time.monotonic() - self._last_sweep >= self._span
        async with self.database.connection("count a send to a member") as conn, conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"member-sends:{self.scope}:{member}",)
            )
            now = await _now(conn)
            await self._forget_old(conn, member if not sweep else None, now)
            wait = waits_for(await self._ages(conn, member, now), self.windows, 1)[0]
            if wait <= 0:
                await conn.execute(
                    "INSERT INTO member_sends (scope, member, sent_at) VALUES (%s, %s, %s)", (self.scope, member, now)
                )
        if sweep:
            self._last_sweep = time.monotonic()
        return max(wait, 0.0)

    async def _ages(self, conn: AsyncConnection[TupleRow], member: str, now: float) -> list[float]:
        params = {"now": now, "scope": self.scope, "member": member, "span": self._span}
        cursor = await conn.execute(_AGES, params)
        return [float(row[0]) for row in await cursor.fetchall()]

    async def _forget_old(self, conn: AsyncConnection[TupleRow], member: str | None, now: float) -> None:
        """Delete the sends that left every window: `member`'s, or (None) the whole scope's."""
        horizon = now - self._span
        if member is None:
            await conn.execute("DELETE FROM member_sends WHERE scope = %s AND sent_at <= %s", (self.scope, horizon))
        else:
            await conn.execute(
                "DELETE FROM member_sends WHERE scope = %s AND member = %s AND sent_at <= %s",
                (self.scope, member, horizon),
            )


async def _now(conn: AsyncConnection[TupleRow]) -> float:
    cursor = await conn.execute(_NOW)
    row = await cursor.fetchone()
    assert row is not None
    return float(row[0])
