"""The 5-field cron parser: known expressions, clear errors, and a property test against a minute-by-minute search."""

from __future__ import annotations

import datetime as dt
import itertools
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agenthub.scheduler.cron import CronError, CronSpec, parse_cron
from agenthub.scheduler.jobs import JobError, check_cron

SHANGHAI = ZoneInfo("Asia/Shanghai")
BERLIN = ZoneInfo("Europe/Berlin")


def at(tz: ZoneInfo, year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> dt.datetime:
    return dt.datetime(year, month, day, hour, minute, tzinfo=tz)


def test_weekday_mornings_in_shanghai() -> None:
    spec = parse_cron("30 9 * * mon-fri")
    friday_evening = at(SHANGHAI, 2026, 12, 4, 18, 0)
    assert spec.next_after(friday_evening, SHANGHAI) == at(SHANGHAI, 2026, 12, 7, 9, 30)


def test_steps_lists_and_macros() -> None:
    spec = parse_cron("*/15 8,20 * * *")
    assert spec.minutes == {0, 15, 30, 45} and spec.hours == {8, 20}
    assert parse_cron("@daily").next_after(at(SHANGHAI, 2026, 1, 1, 0, 0), SHANGHAI) == at(SHANGHAI, 2026, 1, 2)
    assert parse_cron("0 0 * * 7").weekdays == {0}


def test_day_of_month_or_day_of_week_when_both_are_given() -> None:
    spec = parse_cron("0 12 1 * fri")  # the 1st of every month, and every Friday
    start = at(SHANGHAI, 2026, 12, 1, 13, 0)  # a Tuesday, after noon
    assert spec.next_after(start, SHANGHAI) == at(SHANGHAI, 2026, 12, 4, 12, 0)


def test_a_fixed_time_in_the_spring_forward_gap_runs_just_after_the_change() -> None:
    gap = parse_cron("30 2 * * *")  # 02:30 does not exist in Berlin on 2026-03-29: clocks go 02:00 → 03:00
    moved = gap.next_after(at(BERLIN, 2026, 3, 28, 12, 0), BERLIN)
    assert moved.timestamp() == dt.datetime(2026, 3, 29, 1, 0, tzinfo=dt.UTC).timestamp()  # 03:00 CEST
    assert gap.next_after(moved, BERLIN) == at(BERLIN, 2026, 3, 30, 2, 30)
    hourly = parse_cron("30 * * * *")  # a wildcard-hour job just has no 02:30 that day
    assert hourly.next_after(at(BERLIN, 2026, 3, 29, 1, 45), BERLIN) == at(BERLIN, 2026, 3, 29, 3, 30)
    even = parse_cron("0 */2 * * *")  # nor a 02:00, and nothing extra either
    assert even.next_after(at(BERLIN, 2026, 3, 29, 0, 30), BERLIN) == at(BERLIN, 2026, 3, 29, 4, 0)


def test_in_the_repeated_fall_back_hour_a_fixed_time_runs_once_and_a_wildcard_hour_job_in_both() -> None:
    repeat = parse_cron("30 2 * * *")  # 02:30 happens twice in Berlin on 2026-10-25
    first = repeat.next_after(at(BERLIN, 2026, 10, 25, 0, 0), BERLIN)
    assert first.fold == 0 and first.hour == 2
    assert repeat.next_after(first, BERLIN).day == 26
    quarter = parse_cron("*/15 * * * *")
    runs = [quarter.next_after(at(BERLIN, 2026, 10, 25, 1, 50), BERLIN)]
    while len(runs) < 10:
        runs.append(quarter.next_after(runs[-1], BERLIN))
    utc = [r.timestamp() for r in runs]
    assert [b - a for a, b in itertools.pairwise(utc)] == [900.0] * 9  # no quarter hour lost
    assert [(r.hour, r.minute, r.fold) for r in runs[:9]] == [
        (2, 0, 0),
        (2, 15, 0),
        (2, 30, 0),
        (2, 45, 0),
        (2, 0, 1),
        (2, 15, 1),
        (2, 30, 1),
        (2, 45, 1),
        (3, 0, 0),
    ]


@pytest.mark.parametrize(
    ("expression", "words"),
    [
        ("* * * *", "5 fields"),
        ("61 * * * *", "minute"),
        ("* 24 * * *", "hour"),
        ("* * 0 * *", "day of month"),
        ("* * * 13 *", "month"),
        ("* * * * funday", "day of week"),
        ("*/0 * * * *", "step"),
        ("5-1 * * * *", "backwards"),
        ("0 0 30 2 *", "never matches"),
    ],
)
def test_bad_expressions_say_what_is_wrong(expression: str, words: str) -> None:
    with pytest.raises(CronError, match=words):
        parse_cron(expression).next_after(at(SHANGHAI, 2026, 1, 1), SHANGHAI)


def brute_force_next(spec: CronSpec, after: dt.datetime, tz: ZoneInfo, limit_minutes: int) -> dt.datetime | None:
    """Minute by minute in UTC: the first whose local wall time matches (in a repeated hour only the first pass,
    unless the hour field is a wildcard), or, for a fixed-hour job, the first minute after a gap that skipped a
    matching wall time."""
    utc = after.astimezone(dt.UTC).replace(second=0, microsecond=0)
    for _ in range(limit_minutes):
        utc += dt.timedelta(minutes=1)
        local = utc.astimezone(tz)
        wall = local.replace(tzinfo=None)
        before = (utc - dt.timedelta(minutes=1)).astimezone(tz).replace(tzinfo=None)
        skipped = [before + dt.timedelta(minutes=n) for n in range(1, int((wall - before).total_seconds()) // 60)]
        hit = spec.matches(wall) and (local.fold == 0 or spec.any_hour)
        moved = not spec.any_hour and any(spec.matches(w) for w in skipped)
        if (hit or moved) and utc > after:
            return local
    return None


def _field(low: int, high: int) -> st.SearchStrategy[str]:
    single = st.integers(low, high).map(str)
    step = st.integers(1, high - low + 1).map(lambda s: f"*/{s}")
    ranged = st.tuples(st.integers(low, high), st.integers(low, high)).map(lambda r: f"{min(r)}-{max(r)}")
    item = st.one_of(single, step, ranged)
    return st.one_of(st.just("*"), st.lists(item, min_size=1, max_size=3).map(",".join))


EXPRESSIONS = st.tuples(_field(0, 59), _field(0, 23), _field(1, 28), st.just("*"), _field(0, 6)).map(" ".join)
STARTS = st.datetimes(min_value=dt.datetime(2025, 1, 1), max_value=dt.datetime(2027, 12, 31)).map(
    lambda d: d.replace(tzinfo=dt.UTC)
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(EXPRESSIONS, STARTS, st.sampled_from([SHANGHAI, BERLIN, ZoneInfo("UTC")]))
def test_next_after_is_the_first_matching_minute(expression: str, start: dt.datetime, tz: ZoneInfo) -> None:
    spec = parse_cron(expression)
    found = spec.next_after(start, tz)
    assert found > start
    assert found.second == 0 and spec.matches(found.replace(tzinfo=None))
    expected = brute_force_next(spec, start, tz, limit_minutes=40 * 24 * 60)
    if expected is not None:
        assert found.timestamp() == expected.timestamp()  # (equal wall times in one zone compare equal across folds)


DST_STARTS = st.one_of(
    st.datetimes(min_value=dt.datetime(2026, 3, 28, 20), max_value=dt.datetime(2026, 3, 29, 2)),
    st.datetimes(min_value=dt.datetime(2026, 10, 24, 20), max_value=dt.datetime(2026, 10, 25, 2)),
).map(lambda d: d.replace(tzinfo=dt.UTC))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(EXPRESSIONS, DST_STARTS)
def test_next_after_around_berlins_dst_changes_matches_the_minute_by_minute_rule(
    expression: str, start: dt.datetime
) -> None:
    spec = parse_cron(expression)
    found = spec.next_after(start, BERLIN)
    expected = brute_force_next(spec, start, BERLIN, limit_minutes=40 * 24 * 60)
    assert found.timestamp() > start.timestamp()
    if expected is not None:
        assert found.timestamp() == expected.timestamp(), (found, expected)


@pytest.mark.parametrize(
    ("expression", "now", "min_interval_s"),
    [
        ("0,5,10,15,20,25,30,35,40,45,50,55,56 * * * *", at(SHANGHAI, 2026, 12, 1, 8, 59), 300),  # 55 → 56
        ("0 0-22/2,23 * * *", at(SHANGHAI, 2026, 12, 1, 23, 30), 7200),  # 22:00 → 23:00, a day of runs later
        ("0 0,12,23 * * *", at(SHANGHAI, 2026, 12, 1, 23, 30), 7200),  # 23:00 → 00:00 across midnight
    ],
)
def test_the_minimum_interval_is_checked_over_every_gap_of_a_day_and_across_midnight(
    expression: str, now: dt.datetime, min_interval_s: float
) -> None:
    with pytest.raises(JobError, match="more often"):
        check_cron(expression, "Asia/Shanghai", now.timestamp(), min_interval_s)


@pytest.mark.parametrize("expression", ["*/5 * * * *", "0 0-22/2 * * *", "0 0,12 * * *", "55 23 * * *"])
def test_jobs_as_frequent_as_the_minimum_interval_are_accepted(expression: str) -> None:
    now = at(SHANGHAI, 2026, 12, 1, 23, 30).timestamp()
    assert check_cron(expression, "Asia/Shanghai", now, 300) > now
