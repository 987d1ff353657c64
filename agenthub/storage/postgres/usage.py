"""`PostgresUsageStore`: usage calls and day roll-ups, and budget reservations shared by every instance.

A reservation is checked and taken in one call of `usage_reserve_set` (migration 28: `usage_reserve_except` of
migration 22 in two statements; that one as `usage_reserve_totals` of migration 17, leaving out the reservations the
caller settled and stored the usage of) under an advisory lock per scope (taken in sorted order, so two turns
sharing scopes never deadlock): what every instance's running turns reserved counts until it is released (with the
turn's usage, in one transaction) or its `expires_at` passes (the instance died). The check reads each scope's
running totals (`usage_totals`: a day's and a month's row), which every change of `usage_days` updates in its own
transaction (after its day rows, in key order: writers never deadlock), so a check reads a few rows however much
was used in the month.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import time
from collections.abc import Collection, Mapping, Sequence
from json.encoder import encode_basestring

from psycopg import AsyncCursor
from psycopg.rows import TupleRow

from agenthub.storage.postgres.database import Database
from agenthub.storage.postgres.schema_usage import USAGE_TOTALS_ADD, USAGE_TOTALS_OF
from agenthub.storage.usage import (
    Claim,
    ClaimRide,
    Forgotten,
    Reservation,
    Scope,
    UsageRow,
    forgotten_tag,
    reservation_id,
    reservation_of,
    scope_keys,
)
from agenthub.storage.usage_marks import ForgetMark, names_told_after, unnamed, who_of

_ADD = "SELECT agenthub_usage_add(%s::json, %s::text[])"
"""A write in one round trip (migration 30): the calls (those made before a forget of their sender, as the marks
read first say, naming the tag: `usage_marks.ForgetMark.covers`), their day roll-ups and running totals, and the
reservations it ends; the positions (1-based) of the rows the marks redacted."""
_COUNT_CALL = (
    "SELECT count(*) FROM usage_calls WHERE at = to_timestamp(%s) AND day = %s AND purpose = %s AND agent = %s "
    "AND channel = %s AND chat_id = %s AND sender_id = %s AND model = %s AND input = %s AND output = %s "
    "AND cache_read = %s AND cache_write = %s"
)
ADD_TOTALS = USAGE_TOTALS_ADD.format(
    totals="SELECT x.scope, x.period, x.tokens FROM unnest(%s::text[], %s::text[], %s::bigint[]) "
    "WITH ORDINALITY AS x(scope, period, tokens, n) ORDER BY n"
)
"""The running totals of a write's rows (`totals_of`: summed per key, in key order)."""
_RESERVE = "SELECT o_scope, o_day, o_month, o_reserved FROM usage_reserve_set(%s, %s, %s, %s, %s, %s::text[])"
_RELEASE = "DELETE FROM usage_reservations WHERE id = ANY(%s)"
_ADD_ON_CONFLICT = """ON CONFLICT ({key}, agent, channel, chat_id, sender_id, model, purpose) DO UPDATE SET
    input = d.input + excluded.input, output = d.output + excluded.output,
    cache_read = d.cache_read + excluded.cache_read, cache_write = d.cache_write + excluded.cache_write,
    calls = d.calls + excluded.calls, estimated = d.estimated + excluded.estimated"""
_DAYS = """SELECT to_char(day, 'YYYY-MM-DD'), purpose, agent, channel, chat_id, sender_id, model, input, output,
    cache_read, cache_write, calls, estimated FROM usage_days WHERE day >= %s AND day <= %s
UNION ALL
SELECT month, purpose, agent, channel, chat_id, sender_id, model, input, output, cache_read, cache_write, calls,
    estimated FROM usage_months WHERE month >= %s AND month <= %s
ORDER BY 1, 3, 4, 5, 6, 7, 2"""
"""The day roll-ups of the range, and the month roll-ups of its months that retention folded (`day` the month)."""
_FOLD_MONTHS = f"""WITH gone AS (DELETE FROM usage_days WHERE day < %s RETURNING *),
folded AS (
INSERT INTO usage_months AS d (month, agent, channel, chat_id, sender_id, model, purpose, input, output, cache_read,
    cache_write, calls, estimated)
SELECT to_char(day, 'YYYY-MM'), agent, channel, chat_id, sender_id, model, purpose, sum(input), sum(output),
    sum(cache_read), sum(cache_write), sum(calls), sum(estimated)
FROM gone GROUP BY 1, agent, channel, chat_id, sender_id, model, purpose
{_ADD_ON_CONFLICT.format(key="month")})
SELECT count(*) FROM gone"""
"""The day roll-ups before the first day kept, summed into their months' roll-ups (added to a month folded before:
a late write of an old day)."""
PRUNE_LOCK = 7_715_020
"""The advisory lock one instance's prune holds (the others skip theirs)."""
SWEEP_S = 60.0
"""How often an instance deletes reservations that lapsed long ago (a dead instance's)."""


def _date(day: str) -> dt.date:
    return dt.date.fromisoformat(day)


NONE = "{}"
"""`p_ignore` when nothing is left out: the empty array's literal (what psycopg sends for an empty list too, as text of
no declared type, after inspecting the list each time)."""
_day_date = functools.lru_cache(maxsize=8)(_date)
"""`_date` of a check's day (the same day for every check of it)."""


class PostgresUsageStore:
    """The tables of migration 8 (`usage_calls`, `usage_days`, `usage_reservations`, `usage_warnings`)."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self._swept = 0.0

    async def add(self, rows: Sequence[UsageRow], *, release: Sequence[str] = ()) -> None:
        if not rows and not release:
            return
        if not rows:  # the turn's calls were written already: one statement ends its reservations
            async with self.database.connection("release a turn's budget") as conn:
                await conn.execute(_RELEASE, (list(release),))
            return
        async with self.database.connection("record model usage") as conn:
            await conn.execute(_ADD, (_calls(rows), list(release) if release else NONE))

    async def unrecorded(self, rows: Sequence[UsageRow]) -> list[UsageRow]:
        """One count per distinct call (a recovered spool holds a few rows): `usage_calls` rows with the same
        time (converted as when inserted), who, model, purpose and tokens."""
        wanted: dict[UsageRow, int] = {}
        for row in rows:
            wanted[row] = wanted.get(row, 0) + 1
        missing: list[UsageRow] = []
        async with self.database.connection("check recovered usage") as conn, conn.cursor() as cursor:
            marks = await _marks(cursor, who_of(wanted))  # a row a forget redacted is stored under the tag
            for row, count in wanted.items():
                stored = unnamed([row], marks)[0]
                await cursor.execute(
                    _COUNT_CALL, (stored.at, _date(stored.day), stored.purpose, *stored.group[:5], *_counts(stored)[:4])
                )
                found = await cursor.fetchone()
                have = int(found[0]) if found is not None else 0
                missing += [row] * max(count - have, 0)
        return missing

    async def reserve(
        self, claims: Sequence[Claim], day: str, tokens: int, ttl_s: float, *, ignore: Collection[str] = ()
    ) -> Reservation:
        """One round trip (`usage_reserve_set`, migration 28): the scopes' locks in key order, their usage and
        what running turns reserved (but `ignore`), the reservation unless a limit is reached; lapsed rows are swept
        now and then."""
        ride = self.ride(claims, day, tokens, ttl_s, ignore=ignore)
        sweep = time.monotonic() - self._swept >= SWEEP_S
        async with self.database.connection("reserve a turn's budget") as conn:
            cursor = await conn.execute(_RESERVE, ride.params)
            found = await cursor.fetchall()
            if sweep:
                await conn.execute("DELETE FROM usage_reservations WHERE expires_at < now() - interval '1 hour'")
        if sweep:
            self._swept = time.monotonic()
        return reservation_of(claims, ride.id, found)

    def ride(
        self, claims: Sequence[Claim], day: str, tokens: int, ttl_s: float, *, ignore: Collection[str] = ()
    ) -> ClaimRide:
        """`usage_reserve_set`'s arguments (the claims in key order: the scopes' locks are taken in it), to be
        sent alone (`reserve`) or with a session's claim (`PostgresSessionStore.claim`, migrations 26 and 28)."""
        ordered = sorted(claims, key=_claim_key) if len(claims) > 1 else claims
        rid = reservation_id()
        claimed = ", ".join(
            [f'{_scope_json(c.scope)}, "day": {c.day_limit}, "month": {c.month_limit}}}' for c in ordered]
        )
        return ClaimRide(rid, (rid, f"[{claimed}]", _day_date(day), tokens, ttl_s, list(ignore) if ignore else NONE))

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

    async def name_senders(
        self, names: Mapping[tuple[str, str], str], told: Mapping[tuple[str, str], float] | None = None
    ) -> None:
        if not names:
            return
        async with (
            self.database.connection("note senders' names") as conn,
            conn.transaction(),
            conn.cursor() as cursor,
        ):  # a name told before a forget of its sender is not written (the marks read first, as `add`)
            marks = await _marks(cursor, sorted({(c, forgotten_tag(c, s)) for c, s in names}))
            ordered = sorted(names_told_after(names, told or {}, marks).items())  # one lock order for every writer
            if ordered:
                params = ([w[0] for w, _ in ordered], [w[1] for w, _ in ordered], [n for _, n in ordered])
                await cursor.execute(_NAME_SENDERS, params)

    async def sender_names(self, who: Collection[tuple[str, str]]) -> dict[tuple[str, str], str]:
        if not who:
            return {}
        pairs = list(who)
        async with self.database.connection("read senders' names") as conn:
            cursor = await conn.execute(_SENDER_NAMES, ([p[0] for p in pairs], [p[1] for p in pairs]))
            found = await cursor.fetchall()
        return {(str(r[0]), str(r[1])): str(r[2]) for r in found}

    async def days(self, first: str, last: str) -> list[UsageRow]:
        async with self.database.connection("read usage") as conn:
            cursor = await conn.execute(_DAYS, (_date(first), _date(last), first[:7], last[:7]))
            found = await cursor.fetchall()
        return [UsageRow(str(r[0]), *r[1:7], *(int(v) for v in r[7:])) for r in found]

    async def prune(self, before_month: str) -> int:
        """One transaction, by one instance at a time (another's prune under way: nothing to do now)."""
        first_kept = _date(before_month + "-01")
        async with self.database.connection("prune old usage") as conn, conn.transaction():
            locked = await (await conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (PRUNE_LOCK,))).fetchone()
            if locked is None or not locked[0]:
                return 0
            folded = await (await conn.execute(_FOLD_MONTHS, (first_kept,))).fetchone()
            await conn.execute("DELETE FROM usage_calls WHERE day < %s", (first_kept,))
            await conn.execute(
                "DELETE FROM usage_totals WHERE length(period) = 10 AND left(period, 7) < %s", (before_month,)
            )
            await conn.execute("DELETE FROM usage_warnings WHERE left(period, 7) < %s", (before_month,))
        return int(folded[0]) if folded is not None else 0

    async def forget(self, who: Forgotten) -> int:
        """The calls and day rows naming the person, redacted in one transaction; the warning marks naming them go
        (at worst they are warned once more)."""
        params = {
            "channel": who.channel,
            "sender": who.sender_id,
            "tag": who.tag,
            "agents": list(who.agents),
            "chat": who.chat_id,
        }
        async with self.database.connection("forget a person's usage") as conn, conn.transaction():
            # usage writes wait (and are waited for) meanwhile: the rows and totals this moves are locked in no
            # order a writer's could cross
            await conn.execute("LOCK TABLE usage_days IN SHARE ROW EXCLUSIVE MODE")
            calls = await conn.execute(_FORGET_CALLS, params)
            days = await (await conn.execute(_FORGET_DAYS, params)).fetchone()
            await conn.execute(_FORGET_WARNINGS, params)
            await conn.execute(_FORGET_NAME, params)
            await conn.execute(_FORGET_MONTHS, params)
            await conn.execute(_MARK, params)  # last: what another instance writes from now on checks it
            return max(calls.rowcount, 0) + (int(days[0]) if days is not None else 0)


_WHO = (
    "channel = %(channel)s AND sender_id = %(sender)s AND agent = ANY(%(agents)s) "
    "AND (%(chat)s::text IS NULL OR chat_id = %(chat)s)"
)
_CHAT = "CASE WHEN chat_id = %(sender)s THEN %(tag)s ELSE chat_id END"
_MOVED = f"""SELECT day, agent, channel, chat_id, sender_id, -(input + output + cache_read + cache_write) AS tokens
FROM gone UNION ALL
SELECT day, agent, channel, {_CHAT}, %(tag)s, input + output + cache_read + cache_write FROM gone"""
"""What a forget moves in the running totals: the person's (and their direct chat's) tokens to their tag's."""
_FORGET_CALLS = f"UPDATE usage_calls SET sender_id = %(tag)s, chat_id = {_CHAT} WHERE {_WHO}"
_FORGET_DAYS = f"""WITH gone AS (DELETE FROM usage_days WHERE {_WHO} RETURNING *),
moved AS (
INSERT INTO usage_days AS d (day, agent, channel, chat_id, sender_id, model, purpose, input, output, cache_read,
    cache_write, calls, estimated)
SELECT day, agent, channel, new_chat, %(tag)s, model, purpose, sum(input), sum(output), sum(cache_read),
    sum(cache_write), sum(calls), sum(estimated)
FROM (SELECT *, {_CHAT} AS new_chat FROM gone) g GROUP BY day, agent, channel, new_chat, model, purpose
ON CONFLICT (day, agent, channel, chat_id, sender_id, model, purpose) DO UPDATE SET
    input = d.input + excluded.input, output = d.output + excluded.output,
    cache_read = d.cache_read + excluded.cache_read, cache_write = d.cache_write + excluded.cache_write,
    calls = d.calls + excluded.calls, estimated = d.estimated + excluded.estimated
RETURNING 1),
totals AS ({USAGE_TOTALS_ADD.format(totals=USAGE_TOTALS_OF.format(rows=_MOVED))} RETURNING 1)
SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM totals)"""
"""The person's day rows go, and come back under their tag (added to rows an earlier forget left there)."""
_FORGET_MONTHS = f"""WITH gone AS (DELETE FROM usage_months WHERE {_WHO} RETURNING *)
INSERT INTO usage_months AS d (month, agent, channel, chat_id, sender_id, model, purpose, input, output, cache_read,
    cache_write, calls, estimated)
SELECT month, agent, channel, new_chat, %(tag)s, model, purpose, sum(input), sum(output), sum(cache_read),
    sum(cache_write), sum(calls), sum(estimated)
FROM (SELECT *, {_CHAT} AS new_chat FROM gone) g GROUP BY month, agent, channel, new_chat, model, purpose
{_ADD_ON_CONFLICT.format(key="month")}"""
"""The person's month roll-ups come back under their tag (as `_FORGET_DAYS`; month totals keep no names)."""
_MARK = """INSERT INTO usage_forgotten (channel, tag, agents, chat_id, forgotten_at)
VALUES (%(channel)s, %(tag)s, %(agents)s, CASE WHEN %(chat)s::text = %(sender)s THEN %(tag)s ELSE %(chat)s END,
    clock_timestamp())"""
"""The forget's mark (`usage_marks.ForgetMark`: the tag, never the id; a direct chat named by the tag)."""
_MARKS = "SELECT o_channel, o_tag, o_agents, o_chat, o_at FROM usage_forget_marks(%s, %s)"
_FORGET_NAME = "DELETE FROM usage_names WHERE channel = %(channel)s AND sender_id = %(sender)s"
"""Their display name goes with their id."""
_NAME_SENDERS = """INSERT INTO usage_names AS n (channel, sender_id, name)
SELECT * FROM unnest(%s::text[], %s::text[], %s::text[])
ON CONFLICT (channel, sender_id) DO UPDATE SET name = excluded.name, named_at = now() WHERE n.name <> excluded.name"""
_SENDER_NAMES = """SELECT n.channel, n.sender_id, n.name FROM usage_names n
JOIN unnest(%s::text[], %s::text[]) AS w(channel, sender_id) USING (channel, sender_id)"""
_FORGET_WARNINGS = """DELETE FROM usage_warnings
WHERE scope IN ('user:' || %(channel)s || ':' || %(sender)s, 'chat:' || %(channel)s || ':' || %(sender)s)"""


def _claim_key(claim: Claim) -> str:
    return claim.scope.key


@functools.lru_cache(maxsize=4096)  # a scope is checked again and again: its part of the claims' JSON made once
def _scope_json(scope: Scope) -> str:
    """A claim's JSON object for `usage_reserve_set` without its limits and its closing brace."""
    quoted = encode_basestring  # as `json.dumps(..., ensure_ascii=False)` writes a string (a dict of them: 3× slower)
    return (
        f'{{"kind": {quoted(scope.kind)}, "channel": {quoted(scope.channel)}, "ident": {quoted(scope.ident)}, '
        f'"key": {quoted(scope.key)}'
    )


def _calls(rows: Sequence[UsageRow]) -> str:
    """`_ADD`'s first parameter: the rows, each with its sender's tag, as one JSON array (one value to send)."""
    return json.dumps(
        [
            {
                "at": r.at,
                "day": r.day,
                "purpose": r.purpose,
                "agent": r.agent,
                "channel": r.channel,
                "chat_id": r.chat_id,
                "sender_id": r.sender_id,
                "model": r.model,
                "tag": forgotten_tag(r.channel, r.sender_id),
                "input": r.input,
                "output": r.output,
                "cache_read": r.cache_read,
                "cache_write": r.cache_write,
                "calls": r.calls,
                "estimated": r.estimated,
            }
            for r in rows
        ],
        ensure_ascii=False,
    )


async def _marks(cursor: AsyncCursor[TupleRow], who: Sequence[tuple[str, str]]) -> list[ForgetMark]:
    """The forget marks of `who` ((channel, tag) pairs), read after the lock a forget waits for (migration 23)."""
    if not who:
        return []
    await cursor.execute(_MARKS, ([c for c, _ in who], [t for _, t in who]))
    return [ForgetMark(str(r[0]), str(r[1]), tuple(r[2]), r[3], float(r[4])) for r in await cursor.fetchall()]


def totals_of(rows: Sequence[UsageRow]) -> tuple[list[str], list[str], list[int]]:
    """The rows' tokens per scope key and day or month, in key order (as `usage_totals` is locked by every writer)."""
    summed: dict[tuple[str, str], int] = {}
    for row in rows:
        tokens = row.tokens
        for scope in scope_keys(row):
            for period in (row.day, row.day[:7]):
                summed[(scope, period)] = summed.get((scope, period), 0) + tokens
    ordered = sorted(summed.items())
    return [k[0] for k, _ in ordered], [k[1] for k, _ in ordered], [v for _, v in ordered]


def _counts(r: UsageRow) -> tuple[int, ...]:
    return (r.input, r.output, r.cache_read, r.cache_write, r.calls, r.estimated)
