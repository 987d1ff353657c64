"""`PostgresUsageStore`: usage calls and day roll-ups, and budget reservations shared by every instance.

A reservation is checked and taken in one transaction under an advisory lock per scope (taken in sorted order, so two
turns sharing scopes never deadlock): what every instance's running turns reserved counts until it is released or
its `expires_at` passes (the instance died).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from agenthub.storage.postgres.database import Database
from agenthub.storage.usage import Claim, Reservation, Scope, UsageRow, judge, month_days

_INSERT_CALL = (
    "INSERT INTO usage_calls (at, day, purpose, agent, channel, chat_id, sender_id, model, input, output, cache_read, "
    "cache_write, estimated) VALUES (to_timestamp(%s), %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
_UPSERT_DAY = (
    "INSERT INTO usage_days AS d (day, agent, channel, chat_id, sender_id, model, purpose, input, output, cache_read, "
    "cache_write, calls, estimated) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (day, agent, channel, chat_id, sender_id, model, purpose) DO UPDATE SET "
    "input = d.input + excluded.input, output = d.output + excluded.output, "
    "cache_read = d.cache_read + excluded.cache_read, cache_write = d.cache_write + excluded.cache_write, "
    "calls = d.calls + excluded.calls, estimated = d.estimated + excluded.estimated"
)
_SUM = "coalesce(sum(input + output + cache_read + cache_write), 0)"
_USED = {
    "user": f"SELECT {_SUM} FROM usage_days WHERE channel = %s AND sender_id = %s AND day >= %s AND day <= %s",
    "chat": f"SELECT {_SUM} FROM usage_days WHERE channel = %s AND chat_id = %s AND day >= %s AND day <= %s",
    "agent": f"SELECT {_SUM} FROM usage_days WHERE agent = %s AND day >= %s AND day <= %s",
}
_RESERVED = "SELECT coalesce(sum(tokens), 0) FROM usage_reservations WHERE scope = %s AND expires_at > now()"


def _date(day: str) -> dt.date:
    return dt.date.fromisoformat(day)


class PostgresUsageStore:
    """The tables of migration 8 (`usage_calls`, `usage_days`, `usage_reservations`, `usage_warnings`)."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def add(self, rows: Sequence[UsageRow]) -> None:
        if not rows:
            return
        calls = [(r.at, _date(r.day), r.purpose, *r.group[:5], *_counts(r)[:4], r.estimated > 0) for r in rows]
        days = [(_date(r.day), *r.group, *_counts(r)) for r in rows]
        days.sort(key=lambda d: tuple(str(v) for v in d[:7]))  # one lock order for every writer
        async with (
            self.database.connection("record model usage") as conn,
            conn.transaction(),
            conn.cursor() as cursor,
        ):
            await cursor.executemany(_INSERT_CALL, calls)
            await cursor.executemany(_UPSERT_DAY, days)

    async def reserve(self, claims: Sequence[Claim], day: str, tokens: int, ttl_s: float) -> Reservation:
        keys = sorted({c.scope.key for c in claims})
        async with self.database.connection("reserve a turn's budget") as conn, conn.transaction():
            for key in keys:
                await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("budget:" + key,))
            used = {c.scope.key: await _used(conn, c.scope, day) for c in claims}
            standings, refused = judge(claims, used)
            if refused is not None:
                return Reservation(None, standings, refused)
            rid = uuid.uuid4().hex
            async with conn.cursor() as cursor:
                await cursor.executemany(
                    "INSERT INTO usage_reservations (id, scope, tokens, expires_at) "
                    "VALUES (%s, %s, %s, now() + make_interval(secs => %s))",
                    [(rid, key, tokens, ttl_s) for key in keys],
                )
            await conn.execute("DELETE FROM usage_reservations WHERE expires_at < now() - interval '1 hour'")
        return Reservation(rid, standings)

    async def release(self, reservation_id: str) -> None:
        async with self.database.connection("release a turn's budget") as conn:
            await conn.execute("DELETE FROM usage_reservations WHERE id = %s", (reservation_id,))

    async def first_warning(self, scope_key: str, period_key: str) -> bool:
        async with self.database.connection("note a budget warning") as conn:
            cursor = await conn.execute(
                "INSERT INTO usage_warnings (scope, period) VALUES (%s, %s) ON CONFLICT DO NOTHING RETURNING 1",
                (scope_key, period_key),
            )
            return await cursor.fetchone() is not None

    async def days(self, first: str, last: str) -> list[UsageRow]:
        async with self.database.connection("read usage") as conn:
            cursor = await conn.execute(
                "SELECT day, purpose, agent, channel, chat_id, sender_id, model, input, output, cache_read, "
                "cache_write, calls, estimated FROM usage_days WHERE day >= %s AND day <= %s "
                "ORDER BY day, agent, channel, chat_id, sender_id, model, purpose",
                (_date(first), _date(last)),
            )
            found = await cursor.fetchall()
        return [UsageRow(r[0].isoformat(), *r[1:7], *(int(v) for v in r[7:])) for r in found]


def _counts(r: UsageRow) -> tuple[int, ...]:
    return (r.input, r.output, r.cache_read, r.cache_write, r.calls, r.estimated)


async def _used(conn: AsyncConnection[TupleRow], scope: Scope, day: str) -> tuple[int, int]:
    """The scope's (day, month) usage plus what running turns of every instance reserved in it."""
    first, _ = month_days(day)
    who = (scope.ident,) if scope.kind == "agent" else (scope.channel, scope.ident)
    totals = []
    for since in (day, first):
        cursor = await conn.execute(_USED[scope.kind], (*who, _date(since), _date(day)))
        row = await cursor.fetchone()
        totals.append(int(row[0]) if row is not None else 0)
    cursor = await conn.execute(_RESERVED, (scope.key,))
    row = await cursor.fetchone()
    reserved = int(row[0]) if row is not None else 0
    return totals[0] + reserved, totals[1] + reserved
