"""Reading when a question asks about: windows seen from the scope's now, first/latest orders, and questions whose
words only look like time."""

from __future__ import annotations

import datetime as dt

import pytest

from agenthub.search.when import DAY_MS, mentions_time, time_ask

NOW = dt.datetime(2026, 6, 19, 15, 0, tzinfo=dt.UTC)  # a Friday, on the default zone's calendar
NOW_MS = int(NOW.timestamp() * 1000)


def _days_ago(days: float) -> int:
    return NOW_MS - int(days * DAY_MS)


def _inside(question: str, days: float) -> bool:
    asked = time_ask(question, NOW_MS)
    assert asked is not None and asked.window is not None, question
    start, end = asked.window
    return start <= _days_ago(days) < end


@pytest.mark.parametrize(
    ("question", "inside", "outside"),
    [
        ("What did Mia say yesterday?", 1, 3),
        ("小雨昨天说了什么？", 1, 3),
        ("What did he tell me today?", 0.2, 2),
        ("What did Mia say last week about the garden?", 9, 30),
        ("老陈上周说腰怎么样了？", 9, 30),
        ("How was the run two weeks ago?", 14, 3),
        ("两周前钓鱼出了什么事？", 14, 3),
        ("What happened 3 days ago?", 3, 9),
        ("三天前他说了什么", 3, 9),
        ("老陈上个月买了什么？", 25, 70),
        ("What did she buy last month?", 25, 70),
        ("What did Mia say about the museum in March?", 100, 20),
        ("小雨3月说工作上有什么变化？", 100, 20),
        ("小雨三月说了什么", 100, 20),
        ("上周二他去哪了？", 10, 3),  # a Friday: last week's Tuesday, not this week's
        ("What did we talk about last Tuesday?", 3, 10),  # the most recent Tuesday
    ],
)
def test_a_time_expression_names_a_window_from_now(question: str, inside: float, outside: float) -> None:
    assert _inside(question, inside)
    assert not _inside(question, outside)


def test_a_month_not_yet_come_this_year_is_last_years() -> None:
    assert _inside("What did Mia say in November?", 220)  # 2025-11


@pytest.mark.parametrize(
    ("question", "order", "gone"),
    [
        ("When did we first discuss the launch?", "first", {"first"}),
        ("What was the first thing Mia said about her garden?", "first", {"first"}),
        ("老陈第一次说腰疼是什么时候？", "first", {"第一"}),
        ("What did Mia most recently say about her garden?", "latest", {"recent"}),
        ("朵朵最近怎么了？", "latest", {"最近"}),
    ],
)
def test_first_and_latest_are_orders_whose_words_are_not_the_topic(question: str, order: str, gone: set[str]) -> None:
    asked = time_ask(question, NOW_MS)
    assert asked is not None and asked.window is None and asked.order == order
    assert gone <= asked.words


@pytest.mark.parametrize(
    "question",
    [
        "Where is Chloe originally from?",
        "What is her first name?",
        "Where does Rosa work now?",
        "阿梅现在靠什么谋生？",
        "What car does Evan drive?",
        "会议定在3月5日吗",
    ],
)
def test_words_that_only_look_like_time_ask_nothing_of_it(question: str) -> None:
    assert time_ask(question, NOW_MS) is None


def test_lately_words_are_searched_all_the_same() -> None:
    """最近 and "recently" often mean "these days" and are said in the answer too ("最近在看…"): still searched;
    "most recently" and 第一次 are not."""
    lately = time_ask("吴迪最近在读什么书？", NOW_MS)
    assert lately is not None and lately.order == "latest" and lately.searched
    strict = time_ask("What did Mia most recently say about her garden?", NOW_MS)
    assert strict is not None and strict.order == "latest" and not strict.searched


def test_without_a_now_a_window_is_not_guessed_but_an_order_still_is() -> None:
    assert mentions_time("what did she say last week")
    assert time_ask("what did she say last week", None) is None
    asked = time_ask("when did we first meet", None)
    assert asked is not None and asked.order == "first"


@pytest.mark.parametrize(
    "question",
    [
        "What did I say 999999 days ago?",
        "What happened 99999999999 weeks ago?",
        "那是5000000个月前的事吗",
        "What did I say " + "9" * 5000 + " days ago?",  # more digits than int() reads
        "in May",
        "去年",
    ],
)
@pytest.mark.parametrize("now_ms", [NOW_MS, 0, -62_000_000_000_000, 253_402_000_000_000, 10**20])
def test_numbers_and_nows_out_of_the_calendars_range_ask_no_window(question: str, now_ms: int) -> None:
    """A window past year 1 or 9999 (or a now there: a record's timestamp in ns) is none; never an error."""
    asked = time_ask(question, now_ms)
    assert asked is None or asked.window is None or asked.window[0] < asked.window[1]


@pytest.mark.parametrize(
    ("question", "inside", "outside"),
    [
        ("上周一起去钓鱼的是谁？", 6, 20),  # 一起 (together): last week, not last Monday (11 days ago)
        ("这周天天加班，老板说了什么", 2, 9),  # 天天 (every day): this week, not last Sunday (5 days ago)
        ("十五天前他说了什么", 15, 5),
        ("二十天前买的那本书叫什么", 20, 10),
        ("十二个月前我们在哪", 360, 60),
        ("上上周老陈说了什么", 14, 7),
        ("大前天小雨去了哪里", 3, 1),
    ],
)
def test_chinese_counts_and_words_holding_a_weekday_name_the_window_they_say(
    question: str, inside: float, outside: float
) -> None:
    assert _inside(question, inside)
    assert not _inside(question, outside)


@pytest.mark.parametrize("question", ["一周一次的羽毛球是谁组织的", "每周一开会的是谁"])
def test_a_weekly_habit_is_no_window(question: str) -> None:
    asked = time_ask(question, NOW_MS)
    assert asked is None or asked.window is None


def test_this_weekend_said_at_the_weekend_is_this_one_and_last_weekend_the_one_before() -> None:
    saturday = int(dt.datetime(2026, 6, 20, 15, 0, tzinfo=dt.UTC).timestamp() * 1000)
    for question, inside, outside in [
        ("What did we do this weekend?", 0.2, 7),
        ("What did Mia say at the weekend?", 0.2, 7),
        ("What did we do last weekend?", 7, 0.2),
    ]:
        asked = time_ask(question, saturday)
        assert asked is not None and asked.window is not None, question
        start, end = asked.window
        assert start <= saturday - int(inside * DAY_MS) < end, question
        assert not start <= saturday - int(outside * DAY_MS) < end, question


@pytest.mark.parametrize(
    ("now", "question", "inside", "outside"),
    [
        (dt.datetime(2026, 6, 22, 10, 0), "上周日他说了什么", 1, 8),  # a Monday: yesterday was last week's Sunday
        (dt.datetime(2026, 6, 21, 10, 0), "上周日他说了什么", 7, 0.2),  # a Sunday: a week ago, not today
        (dt.datetime(2026, 6, 21, 10, 0), "上周六他说了什么", 8, 1),  # a Sunday: yesterday is this week's
        (dt.datetime(2026, 6, 22, 10, 0), "What did we say last week?", 3, 12),  # a Monday
        (dt.datetime(2027, 1, 3, 10, 0), "What did Mia say in December?", 20, 40),  # the year before
        (dt.datetime(2027, 1, 3, 10, 0), "What did Mia say this year?", 1, 5),
        (dt.datetime(2026, 7, 2, 10, 0), "What did we say 3 weeks ago?", 21, 7),  # over a month's end
        (dt.datetime(2026, 6, 19, 10, 0), "小雨３月说了什么", 100, 20),  # full-width digits
    ],
)
def test_windows_at_the_week_month_and_year_boundaries(
    now: dt.datetime, question: str, inside: float, outside: float
) -> None:
    now_ms = int(now.replace(tzinfo=dt.UTC).timestamp() * 1000)
    asked = time_ask(question, now_ms)
    assert asked is not None and asked.window is not None
    start, end = asked.window
    assert start <= now_ms - int(inside * DAY_MS) < end
    assert not start <= now_ms - int(outside * DAY_MS) < end
