"""When a question asks about: a time window read from its words ("yesterday", "last week", "two weeks ago", "in
March", "last Tuesday"; 昨天, 上周, 两周前, 三月, 上周二), seen from a given now, or an order ("first time", 第一次 →
the earliest; "latest", "most recently", 最近 → the newest). The second stage (`rerank`) lifts passages said in the
window, or the earliest or newest of the relevant ones; it never drops one."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Literal

from agenthub.search.text import index_terms

Order = Literal["first", "latest"]

DAY_MS = 86_400_000
MAX_DIGITS = 9
"""A count of days (weeks, months) with more digits is read as 10**MAX_DIGITS (no window: past year 1)."""
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_EN_NUMBER = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "couple of": 2}
_ZH_NUMBER = {"一": 1, "两": 2, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10}
_ZH_DAY = "一二三四五六日天"
_NUM = r"(\d+|a|an|one|two|three|four|five|six|couple of)"
_ZH_NUM = r"(\d+|[一两二三四五六七八九]?十[一二三四五六七八九]?|[一两二三四五六七八九十])"

_EN = re.compile(
    r"\b(?:(?P<today>today|this morning|this afternoon|this evening|tonight)"
    r"|(?P<yesterday>yesterday|last night)"
    r"|(?P<before_yesterday>the day before yesterday)"
    rf"|(?P<days>{_NUM}) days? ago"
    rf"|(?P<weeks>{_NUM}) weeks? ago"
    rf"|(?P<months>{_NUM}) months? ago"
    r"|(?P<this_week>this week)|(?P<last_week>last week)"
    r"|(?P<this_month>this month)|(?P<last_month>last month)"
    r"|(?P<last_weekend>last weekend)|(?P<this_weekend>this weekend|the weekend)"
    rf"|(?:last |on |this )(?P<weekday>{'|'.join(WEEKDAYS)})"
    rf"|(?:in |during |back in |early |late |since )(?P<month>{'|'.join(MONTHS)})\b(?! \d)"
    r"|(?P<last_year>last year)|(?P<this_year>this year))\b",
    re.IGNORECASE,
)
_ZH = re.compile(
    r"(?P<three_days_ago>大前天)|(?P<before_yesterday>前天)|(?P<yesterday>昨天|昨晚|昨日)|(?P<today>今天|今早|今晚|今日)"
    rf"|(?P<days>{_ZH_NUM})天(?:前|以前|之前)"
    rf"|(?P<weeks>{_ZH_NUM})(?:个)?(?:周|星期|礼拜)(?:前|以前|之前)"
    r"|(?P<half_month>半个月(?:前|以前|之前))"
    rf"|(?P<months>{_ZH_NUM})个月(?:前|以前|之前)"
    r"|(?P<week_before_last>上上(?:个)?(?:周|星期|礼拜))"
    r"|(?:上|这|本)?(?<![\d一两二三四五六七八九十每])(?:周|星期|礼拜)"
    r"(?P<weekday>一(?![起直共下些点定样次般切同道边])|天(?!天)|[二三四五六日])"
    r"|(?P<last_week>上周|上星期|上个星期|上礼拜|上个礼拜)|(?P<this_week>这周|本周|这星期|这个星期|这礼拜)"
    r"|(?P<last_month>上个月|上月)|(?P<this_month>这个月|本月)"
    rf"|(?P<month>{_ZH_NUM}|十一|十二)月(?!\d|[一二三四五六七八九十]+[日号])"
    r"|(?P<last_year>去年)|(?P<this_year>今年)"
)
_ZH_WEEKDAY_PREFIX = re.compile(r"上(?:周|星期|礼拜)[一二三四五六日天]$")

_FIRST = re.compile(
    r"\b(?:(?:the |for the )?first(?: time)?\b(?! (?:name|aid|class|floor|half|place|prize|language|lady|world))"
    r"|earliest|at first|in the beginning)\b|第一次|头一次|首次|最早|最初|起初|一开始|当初|最先",
    re.IGNORECASE,
)
_LATEST = re.compile(r"\b(?:latest|most recent(?:ly)?|last time)\b|最近一次|最后一次|最新", re.IGNORECASE)
_LATELY = re.compile(r"\b(?:recently|lately)\b|最近|近来|近况", re.IGNORECASE)
"""Latest too, but its words often mean "these days" and are said in the answer as well ("最近在看…"): searched."""


@dataclass(frozen=True)
class TimeAsk:
    """What a question asks of time: `window` (start, end) in ms since the epoch, either or neither, and `order`;
    `words`: the index terms of an order's words ("first time", "most recently"): not the topic, and searched no
    more unless `searched` (a window's words are: "on Saturday" may be the day a turn itself names)."""

    window: tuple[int, int] | None
    order: Order | None
    words: frozenset[str]
    searched: bool = False
    """The order's words are searched all the same (最近, "recently": often "these days", said in the answer too);
    they never count as the topic."""


def mentions_time(question: str) -> bool:
    """Whether `question` names a time window (then its now is worth looking up)."""
    return _EN.search(question) is not None or _ZH.search(question) is not None


def time_ask(question: str, now_ms: int | None, zone: dt.tzinfo = dt.UTC) -> TimeAsk | None:
    """What `question` asks of time, its windows seen from `now_ms` (None: no window, only an order) on the calendar
    of `zone` (`scheduler.timezone`: where "yesterday" begins); None when it names no time."""
    window = _window(question, now_ms, zone) if now_ms is not None else None
    order: Order | None = None
    words, searched = "", False
    if window is None:
        orders: tuple[tuple[Order, re.Pattern[str], bool], ...] = (
            ("first", _FIRST, True),
            ("latest", _LATEST, True),
            ("latest", _LATELY, False),
        )
        for name, pattern, strip in orders:
            if (match := pattern.search(question)) is not None:
                order, words, searched = name, match.group(0), not strip
                break
    if window is None and order is None:
        return None
    return TimeAsk(window, order, frozenset(index_terms(words)) if words else frozenset(), searched)


def _window(question: str, now_ms: int, zone: dt.tzinfo) -> tuple[int, int] | None:
    """The window `question` names seen from `now_ms`; none when it (or the now) lies outside the calendar's years
    1-9999 ("999999 days ago", a record's timestamp in ns): its words are then searched as any other."""
    try:
        return _window_at(question, dt.datetime.fromtimestamp(now_ms / 1000, tz=zone))
    except (OverflowError, ValueError, OSError):
        return None


def _window_at(question: str, now: dt.datetime) -> tuple[int, int] | None:
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    for pattern in (_EN, _ZH):
        match = pattern.search(question)
        if match is None:
            continue
        name = next(k for k, v in match.groupdict().items() if v is not None)
        span = _span(name, match, today, now, pattern is _ZH)
        if span is not None:
            start, end = span
            return _ms(start), _ms(end)
    return None


def _span(
    name: str, match: re.Match[str], today: dt.datetime, now: dt.datetime, zh: bool
) -> tuple[dt.datetime, dt.datetime] | None:
    """The window a matched expression names, a little wider than its words (people round)."""
    day = dt.timedelta(days=1)
    value = match.group(name)
    if name == "today":
        return today - day / 4, now + day
    if name == "yesterday":
        return today - day, today + day / 4
    if name == "three_days_ago":
        return today - 3 * day, today - 2 * day + day / 4
    if name == "before_yesterday":
        return today - 2 * day, today - day + day / 4
    if name == "days":
        n = _number(value, zh)
        return today - (n + 1) * day, today - (n - 2) * day
    if name == "weeks":
        n = _number(value, zh)
        return today - (7 * n + 4) * day, today - (7 * n - 4) * day
    if name == "half_month":
        return today - 19 * day, today - 11 * day
    if name == "months":
        n = _number(value, zh)
        return today - (30 * n + 10) * day, today - (30 * n - 10) * day
    if name == "this_week":
        return today - (today.weekday() + 1) * day, now + day
    if name in ("last_week", "week_before_last"):
        monday = today - (today.weekday() + (7 if name == "last_week" else 14)) * day
        return monday - 2 * day, monday + 9 * day
    if name in ("last_weekend", "this_weekend"):  # said on a Saturday or Sunday, "this weekend" is today's
        back = (today.weekday() - 5) % 7
        saturday = today - (back if name == "this_weekend" and back < 2 else back or 7) * day
        return saturday - day, saturday + 3 * day
    if name == "weekday":
        target = _ZH_DAY.index(value) if zh else WEEKDAYS.index(value.lower())
        back = (today.weekday() - min(target, 6)) % 7 or 7
        if zh and _ZH_WEEKDAY_PREFIX.search(match.group(0)) and back < today.weekday() + 1:
            back += 7  # 上周二 said on a Friday: the Tuesday of last week, not of this one
        that = today - back * day
        return that - day / 2, that + day + day / 2
    if name in ("this_month", "last_month"):
        first = today.replace(day=1)
        if name == "this_month":
            return first - 3 * day, now + day
        previous = (first - day).replace(day=1)
        return previous - 3 * day, first + 3 * day
    if name == "month":
        number = (_number(value, zh) if value not in ("十一", "十二") else 10 + "一二".index(value[1]) + 1) if zh else 0
        month = number if zh else MONTHS.index(value.lower()) + 1
        if not 1 <= month <= 12:
            return None
        year = today.year if month <= today.month else today.year - 1
        start = today.replace(year=year, month=month, day=1)
        end = (start + 32 * day).replace(day=1)
        return start - 2 * day, end + 2 * day
    if name in ("this_year", "last_year"):
        year = today.year - (name == "last_year")
        return today.replace(year=year, month=1, day=1), today.replace(year=year + 1, month=1, day=1)
    return None


def _number(value: str, zh: bool) -> int:
    if value.isdigit():
        return int(value) if len(value) <= MAX_DIGITS else 10**MAX_DIGITS
    if zh and "十" in value and len(value) > 1:  # 十五, 二十, 二十三
        tens, _, ones = value.partition("十")
        return _ZH_NUMBER.get(tens, 1) * 10 + _ZH_NUMBER.get(ones, 0)
    return (_ZH_NUMBER if zh else _EN_NUMBER).get(value.lower(), 1)


def _ms(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000)
