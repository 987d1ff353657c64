"""`agenthub store migrate`: the usage journal's days (so that month budgets and views survive the move) and the HTTP
API's idempotency keys still inside their window, copied into PostgreSQL item by item like the rest (`copy_state.py`).

A usage item is one day: its roll-up (the day's calls summed per agent, chat, sender, model and purpose) becomes
that day's `usage_days` rows; `usage_calls` (one row per call) starts with the move, the per-call journal stays in
`data/usage/`. A forget mark (`data/usage/forgotten.json`) becomes a `usage_forgotten` row (migration 23), so that
usage made before a forget and written after the move still names the person's tag. An idempotency item is one key
taken by a request within `http.idempotency_window_s`."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from agenthub.storage.idempotency import IDEMPOTENCY_DIR
from agenthub.storage.json_text import json_text
from agenthub.storage.postgres.database import Database
from agenthub.storage.postgres.schema_usage import USAGE_TOTALS_ADD, USAGE_TOTALS_OF
from agenthub.storage.postgres.usage import ADD_TOTALS, totals_of
from agenthub.storage.usage import UsageRow
from agenthub.storage.usage_files import FileUsageStore
from agenthub.storage.usage_marks import MARKS_FILE, ForgetMark, read_marks

Digest = Callable[[Any], str]
Settle = Callable[..., Awaitable[None]]

_DAY_ROWS = (
    "SELECT agent, channel, chat_id, sender_id, model, purpose, input, output, cache_read, cache_write, calls, "
    "estimated FROM usage_days WHERE day = %s"
)
_INSERT_DAY = (
    "INSERT INTO usage_days (day, agent, channel, chat_id, sender_id, model, purpose, input, output, cache_read, "
    "cache_write, calls, estimated) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
_TOKENS = "input + output + cache_read + cache_write"
_DROP_DAY = (
    "WITH gone AS (DELETE FROM usage_days WHERE day = %s "
    f"RETURNING day, agent, channel, chat_id, sender_id, -({_TOKENS}) AS tokens) "
    + USAGE_TOTALS_ADD.format(totals=USAGE_TOTALS_OF.format(rows="SELECT * FROM gone"))
)
"""A day's rows go, and their tokens out of the running totals (migration 17), in one statement."""
_MARK_HELD = (
    "SELECT 1 FROM usage_forgotten WHERE channel = %s AND tag = %s AND agents = %s AND chat_id IS NOT DISTINCT FROM %s "
    "AND forgotten_at = to_timestamp(%s)"
)
_INSERT_MARK = (
    "INSERT INTO usage_forgotten (channel, tag, agents, chat_id, forgotten_at) "  # the time converted as `held_mark`'s
    "VALUES (%s, %s, %s, %s, to_timestamp(%s))"
)
_KEY = "SELECT fingerprint, accepted, final FROM idempotency_keys WHERE scope = %s AND key = %s"
_INSERT_KEY = (
    "INSERT INTO idempotency_keys (scope, key, fingerprint, accepted, final, created_at) "
    "VALUES (%s, %s, %s, %s, %s, to_timestamp(%s)) ON CONFLICT (scope, key) DO UPDATE SET "
    "fingerprint = excluded.fingerprint, accepted = excluded.accepted, final = excluded.final, "
    "created_at = excluded.created_at"
)


def day_rows(rows: list[UsageRow]) -> list[list[Any]]:
    """A day's rows in one canonical order, as the database keeps them (who, model, purpose, the counts)."""
    summed: dict[tuple[str, ...], list[int]] = {}
    for r in rows:
        counts = summed.setdefault(r.group, [0] * 6)
        for i, value in enumerate((r.input, r.output, r.cache_read, r.cache_write, r.calls, r.estimated)):
            counts[i] += value
    return sorted([*group, *counts] for group, counts in summed.items())


async def file_days(data_dir: Path) -> dict[str, list[list[Any]]]:
    """Every day of `data/usage/` with its canonical rows."""
    store = FileUsageStore(data_dir)
    days: dict[str, list[UsageRow]] = {}
    for row in await store.days("0001-01-01", "9999-12-31"):
        days.setdefault(row.day, []).append(row)
    return {day: day_rows(rows) for day, rows in sorted(days.items())}


async def held_day(database: Database, day: str) -> list[list[Any]] | None:
    async with database.connection("read a day's usage") as conn:
        cursor = await conn.execute(_DAY_ROWS, (dt.date.fromisoformat(day),))
        found = await cursor.fetchall()
    if not found:
        return None
    return sorted([*r[:6], *(int(v) for v in r[6:])] for r in found)


def write_day(day: str, rows: list[list[Any]]) -> Callable[[AsyncConnection[TupleRow]], Awaitable[object]]:
    """The day's rows in the database become the files' (in the ledger's transaction)."""

    async def write(conn: AsyncConnection[TupleRow]) -> None:
        date = dt.date.fromisoformat(day)
        await conn.execute(_DROP_DAY, (date,))
        async with conn.cursor() as cursor:
            await cursor.executemany(_INSERT_DAY, [(date, *r) for r in rows])
        copied = [UsageRow(day, r[5], *r[:5], *r[6:]) for r in rows]
        await conn.execute(ADD_TOTALS, totals_of(copied))  # the running totals count the day's rows as copied

    return write


def live_keys(data_dir: Path, window_s: float, now: float | None = None) -> list[dict[str, Any]]:
    """The idempotency key files still inside the window, oldest first (a torn or foreign file is left)."""
    root, now = data_dir / IDEMPOTENCY_DIR, time.time() if now is None else now
    found = []
    for path in sorted(root.glob("*.json")) if root.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            fresh = now - float(data["created_at"]) < window_s
            ok = isinstance(data["scope"], str) and isinstance(data["key"], str) and "fingerprint" in data
        except (OSError, ValueError, TypeError, KeyError):
            continue
        if fresh and ok:
            found.append(data)
    return sorted(found, key=lambda d: float(d["created_at"]))


def key_item(data: dict[str, Any]) -> str:
    return json_text([data["scope"], data["key"]])


def key_value(data: dict[str, Any]) -> list[Any]:
    """What a copy must keep of a key: the request's fingerprint, whether it was stored, its final reply."""
    return [str(data["fingerprint"]), bool(data.get("accepted")), data.get("final")]


async def held_key(database: Database, item: str) -> list[Any] | None:
    scope, key = json.loads(item)
    async with database.connection("read an idempotency key") as conn:
        cursor = await conn.execute(_KEY, (scope, key))
        row = await cursor.fetchone()
    if row is None:
        return None
    final = row[2] if isinstance(row[2], dict) or row[2] is None else json.loads(row[2])
    return [str(row[0]), bool(row[1]), final]


def write_key(data: dict[str, Any]) -> Callable[[AsyncConnection[TupleRow]], Awaitable[object]]:
    async def write(conn: AsyncConnection[TupleRow]) -> None:
        final = data.get("final")
        params = (
            data["scope"],
            data["key"],
            str(data["fingerprint"]),
            bool(data.get("accepted")),
            None if final is None else json_text(final),
            float(data["created_at"]),
        )
        await conn.execute(_INSERT_KEY, params)

    return write


def file_marks(data_dir: Path) -> list[ForgetMark]:
    """The files backend's forget marks, each once, in the order they were made."""
    return sorted(set(read_marks(data_dir / "usage" / MARKS_FILE)), key=lambda m: (m.at, mark_item(m)))


def mark_item(mark: ForgetMark) -> str:
    """A mark's name in the copy ledger: all of it (a mark names the tag, never the person)."""
    return json_text(mark_value(mark))


def mark_value(mark: ForgetMark) -> list[Any]:
    return [mark.channel, mark.tag, list(mark.agents), mark.chat, mark.at]


async def held_mark(database: Database, mark: ForgetMark) -> list[Any] | None:
    """The mark's value when the database holds it (its time as the copy converted it), else None."""
    async with database.connection("read a usage forget mark") as conn:
        params = (mark.channel, mark.tag, list(mark.agents), mark.chat, mark.at)
        found = await (await conn.execute(_MARK_HELD, params)).fetchone()
    return None if found is None else mark_value(mark)


def write_mark(mark: ForgetMark) -> Callable[[AsyncConnection[TupleRow]], Awaitable[object]]:
    async def write(conn: AsyncConnection[TupleRow]) -> None:
        await conn.execute(_INSERT_MARK, (mark.channel, mark.tag, list(mark.agents), mark.chat, mark.at))

    return write
