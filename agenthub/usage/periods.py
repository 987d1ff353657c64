"""Days and months in `scheduler.timezone`: which one a moment falls in, and when the current one ends."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

from agenthub.storage.usage import Period


def day_of(ts: float, zone: ZoneInfo) -> str:
    """`YYYY-MM-DD` of epoch seconds `ts` in `zone`."""
    return dt.datetime.fromtimestamp(ts, zone).date().isoformat()


def resets_at(period: Period, ts: float, zone: ZoneInfo) -> dt.datetime:
    """The local midnight that ends the day (or month) `ts` falls in."""
    today = dt.datetime.fromtimestamp(ts, zone).date()
    if period == "day":
        nxt = today + dt.timedelta(days=1)
    else:
        nxt = (today.replace(day=1) + dt.timedelta(days=32)).replace(day=1)
    return dt.datetime.combine(nxt, dt.time(), zone)


def period_key(period: Period, day: str) -> str:
    """`2026-12-03` for a day, `2026-12` for its month."""
    return day if period == "day" else day[:7]


KEEP_DAYS = 400
"""Retention: every day of the last `KEEP_DAYS` keeps its calls and day roll-ups; the months wholly before them keep
only their month roll-ups (docs/cost.md)."""


def first_kept_month(day: str) -> str:
    """`YYYY-MM` of the oldest month retention keeps whole on `day`: the one `KEEP_DAYS` days before it."""
    return (dt.date.fromisoformat(day) - dt.timedelta(days=KEEP_DAYS)).isoformat()[:7]
