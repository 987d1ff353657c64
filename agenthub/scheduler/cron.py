"""A small 5-field cron parser (minute hour day-of-month month day-of-week) with timezone-aware next times."""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass
from zoneinfo import ZoneInfo

SEARCH_YEARS = 5
REPEAT_REACH = dt.timedelta(hours=3)
"""Longer than any clock change (DST moves by at most 2 hours): how far from a moment a gap or repeat can matter."""
"""An expression with no match within this many years (`0 0 30 2 *`) is refused."""

_MONTHS = {m: i for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun"), start=1)} | {
    m: i for i, m in enumerate(("jul", "aug", "sep", "oct", "nov", "dec"), start=7)
}
_WEEKDAYS = {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
_MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}


class CronError(ValueError):
    """A cron expression that cannot be parsed or never matches; the message says which part is wrong."""


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: dict[str, int]


_FIELDS = (
    _Field("minute", 0, 59, {}),
    _Field("hour", 0, 23, {}),
    _Field("day of month", 1, 31, {}),
    _Field("month", 1, 12, _MONTHS),
    _Field("day of week", 0, 7, _WEEKDAYS),
)


@dataclass(frozen=True)
class CronSpec:
    """A parsed expression; day of month and day of week match either (as in Vixie cron) when both are given."""

    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool
    any_weekday: bool
    any_hour: bool = False
    """The hour field is a wildcard (`*`, `*/2`): across DST it runs by the new wall clock, in a repeated hour in
    both passes; a fixed-hour job runs once there, and just after a spring-forward gap that skipped its time."""

    def day_matches(self, day: dt.date) -> bool:
        in_month = day.day in self.days
        in_week = (day.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return in_month and in_week
        return in_month or in_week

    def matches(self, local: dt.datetime) -> bool:
        """Whether the wall-clock minute `local` is one of the expression's."""
        return (
            local.month in self.months
            and self.day_matches(local.date())
            and local.hour in self.hours
            and local.minute in self.minutes
        )

    def next_after(self, after: dt.datetime, tz: ZoneInfo) -> dt.datetime:
        """The first run strictly after `after` (aware), as an aware time in `tz`, the way cron handles DST: a
        fixed-hour time in a spring-forward gap runs just after the change; in a repeated (fall-back) hour a
        fixed-hour job runs once (the first pass), a wildcard-hour job in both passes."""
        first = self._next_first_pass(after, tz)
        if self.any_hour:
            second = self._next_second_pass(after, tz)
            if second is not None and second.timestamp() < first.timestamp():
                return second
        return first

    def _next_first_pass(self, after: dt.datetime, tz: ZoneInfo) -> dt.datetime:
        """Walking wall-clock minutes: the first match that exists (its first occurrence) after `after`; for a
        fixed-hour job a match in a gap stands for the first minute after the gap."""
        moment = after.timestamp()
        local = after.astimezone(tz).replace(tzinfo=None, second=0, microsecond=0) + dt.timedelta(minutes=1)
        limit = local + dt.timedelta(days=366 * SEARCH_YEARS)
        while local < limit:
            moved = self._skip_to_candidate(local)
            if moved is not None:
                local = moved
                continue
            aware = _existing(local, tz)
            if aware is None and not self.any_hour:
                aware = _after_gap(local, tz)
            if aware is not None and aware.timestamp() > moment:
                return aware
            local += dt.timedelta(minutes=1)
        raise CronError(f"cron {self.expression!r} never matches within {SEARCH_YEARS} years")

    def _next_second_pass(self, after: dt.datetime, tz: ZoneInfo) -> dt.datetime | None:
        """The first match after `after` in the second pass of a repeated hour, if a clock change is near (only
        such a run can come before the first pass's next one)."""
        if (after - REPEAT_REACH).astimezone(tz).utcoffset() == (after + REPEAT_REACH).astimezone(tz).utcoffset():
            return None
        moment = after.timestamp()
        local = (after - REPEAT_REACH).astimezone(tz).replace(tzinfo=None, second=0, microsecond=0)
        end = local + 2 * REPEAT_REACH
        while local <= end:
            if self.matches(local) and _existing(local, tz) is not None:  # (a gap's times have two offsets too)
                second = local.replace(tzinfo=tz, fold=1)
                if second.utcoffset() != local.replace(tzinfo=tz).utcoffset() and second.timestamp() > moment:
                    return second
            local += dt.timedelta(minutes=1)
        return None

    def _skip_to_candidate(self, local: dt.datetime) -> dt.datetime | None:
        """The next wall-clock time worth checking when `local` cannot match, else None."""
        if local.month not in self.months:
            year, month = (local.year + 1, 1) if local.month == 12 else (local.year, local.month + 1)
            return dt.datetime(year, month, 1)
        if not self.day_matches(local.date()):
            return dt.datetime.combine(local.date() + dt.timedelta(days=1), dt.time())
        if local.hour not in self.hours:
            return local.replace(minute=0) + dt.timedelta(hours=1)
        if local.minute not in self.minutes:
            later = [m for m in self.minutes if m > local.minute]
            if later:
                return local.replace(minute=min(later))
            return local.replace(minute=0) + dt.timedelta(hours=1)
        return None


def _existing(local: dt.datetime, tz: ZoneInfo) -> dt.datetime | None:
    """`local` in `tz` (first occurrence when ambiguous), or None when that wall time does not exist."""
    aware = local.replace(tzinfo=tz, fold=0)
    back = aware.astimezone(dt.UTC).astimezone(tz)
    return aware if back.replace(tzinfo=None) == local else None


def _after_gap(local: dt.datetime, tz: ZoneInfo) -> dt.datetime | None:
    """The first wall-clock minute after `local` (which a spring-forward gap skipped) that exists in `tz`."""
    for minutes in range(1, int(REPEAT_REACH.total_seconds()) // 60):
        aware = _existing(local + dt.timedelta(minutes=minutes), tz)
        if aware is not None:
            return aware
    return None


@functools.lru_cache(maxsize=1024)
def parse_cron(expression: str) -> CronSpec:
    """Parse `m h dom mon dow` (lists, ranges, steps, names like `mon`/`jan`) or a macro such as `@daily`."""
    text = _MACROS.get(expression.strip().lower(), expression.strip())
    parts = text.split()
    if len(parts) != 5:
        raise CronError(f"cron {expression!r} needs 5 fields (minute hour day month weekday), got {len(parts)}")
    values = [_parse_field(part, spec) for part, spec in zip(parts, _FIELDS, strict=True)]
    weekdays = frozenset(0 if d == 7 else d for d in values[4])
    return CronSpec(
        expression=expression.strip(),
        minutes=values[0],
        hours=values[1],
        days=values[2],
        months=values[3],
        weekdays=weekdays,
        any_day=parts[2].startswith("*"),
        any_weekday=parts[4].startswith("*"),
        any_hour=parts[1].startswith("*"),
    )


def _parse_field(text: str, spec: _Field) -> frozenset[int]:
    found: set[int] = set()
    for item in text.lower().split(","):
        found.update(_parse_item(item, spec))
    return frozenset(found)


def _parse_item(item: str, spec: _Field) -> range:
    base, slash, step_text = item.partition("/")
    step = _number(step_text, spec) if slash else 1
    if step < 1:
        raise CronError(f"cron {spec.name}: step must be at least 1 in {item!r}")
    if base == "*":
        low, high = spec.low, spec.high
    elif "-" in base:
        start, _, end = base.partition("-")
        low, high = _value(start, spec), _value(end, spec)
    else:
        low = _value(base, spec)
        high = spec.high if slash else low
    if low > high:
        raise CronError(f"cron {spec.name}: range {item!r} runs backwards")
    return range(low, high + 1, step)


def _value(text: str, spec: _Field) -> int:
    number = spec.names[text] if text in spec.names else _number(text, spec)
    if not spec.low <= number <= spec.high:
        raise CronError(f"cron {spec.name}: {text!r} is outside {spec.low}-{spec.high}")
    return number


def _number(text: str, spec: _Field) -> int:
    if not text.isdigit():
        raise CronError(f"cron {spec.name}: {text!r} is not a number")
    return int(text)
