"""NameDirectory: cached names, one lookup per person at a time, bounded waits, failures logged once and retried."""

from __future__ import annotations

import asyncio

import pytest
import structlog

from channels.toolkit.names import NameDirectory, NameUnknown


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Platform:
    """A contact API stand-in (the lookup a channel passes in): names by id, failures to raise, a gate to hold."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names
        self.asked: list[str] = []
        self.fail: list[NameUnknown] = []
        self.gate: asyncio.Event | None = None

    async def lookup(self, sender_id: str) -> str | None:
        self.asked.append(sender_id)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise self.fail.pop(0)
        return self.names.get(sender_id)


def directory(platform: Platform, clock: Clock, **kw: float) -> NameDirectory:
    return NameDirectory(platform.lookup, channel="wecom", cred_id="hr", clock=clock, **kw)  # type: ignore[arg-type]


async def test_a_name_is_looked_up_once_and_then_answered_from_the_cache_until_it_expires() -> None:
    platform, clock = Platform({"zhangsan": "张三"}), Clock()
    names = directory(platform, clock, ttl_s=86400)
    assert await names.name("zhangsan") == "张三"
    assert await names.name("zhangsan") == "张三"
    assert platform.asked == ["zhangsan"]
    clock.now += 86401
    assert await names.name("zhangsan") == "张三"
    assert platform.asked == ["zhangsan", "zhangsan"]


async def test_concurrent_first_messages_of_one_person_make_one_lookup() -> None:
    platform, clock = Platform({"zhangsan": "张三"}), Clock()
    platform.gate = asyncio.Event()
    names = directory(platform, clock, wait_s=2.0)
    waiting = [asyncio.create_task(names.name("zhangsan")) for _ in range(8)]
    await asyncio.sleep(0.05)
    platform.gate.set()
    assert await asyncio.gather(*waiting) == ["张三"] * 8
    assert platform.asked == ["zhangsan"] and names.lookups == 1


async def test_a_slow_lookup_gives_the_id_at_once_and_names_the_next_message() -> None:
    platform, clock = Platform({"zhangsan": "张三"}), Clock()
    platform.gate = asyncio.Event()
    names = directory(platform, clock, wait_s=0.05)
    with structlog.testing.capture_logs() as logs:
        assert await names.name("zhangsan") is None  # the turn goes on with the id
        assert await names.name("zhangsan") is None
    assert [e["event"] for e in logs] == ["sender_name_slow"]  # logged once
    platform.gate.set()
    await asyncio.sleep(0.01)
    assert await names.name("zhangsan") == "张三"
    assert platform.asked == ["zhangsan"]


async def test_a_failed_lookup_falls_back_to_the_id_is_logged_once_and_retried_later() -> None:
    platform, clock = Platform({"zhangsan": "张三", "lisi": "李四"}), Clock()
    platform.fail = [NameUnknown("call", "errcode -1", "busy"), NameUnknown("call", "errcode -1", "busy")]
    names = directory(platform, clock, retry_s=600)
    with structlog.testing.capture_logs() as logs:
        assert await names.name("zhangsan") is None
        assert await names.name("zhangsan") is None  # not asked again meanwhile
        assert await names.name("lisi") is None
    assert platform.asked == ["zhangsan", "lisi"]
    assert [e["event"] for e in logs] == ["sender_name_lookup_failed"]
    assert "errcode -1" in logs[0]["reason"]
    clock.now += 601
    assert await names.name("zhangsan") == "张三"


async def test_a_credential_refused_the_contact_api_stops_lookups_for_a_while_with_one_hint() -> None:
    platform, clock = Platform({"a": "甲", "b": "乙"}), Clock()
    platform.fail = [NameUnknown("app", "code 99991672", "grant contact:user.base:readonly")]
    names = directory(platform, clock, retry_s=600)
    with structlog.testing.capture_logs() as logs:
        assert await names.name("a") is None
        assert await names.name("b") is None  # no lookup: the app may not read contacts
    assert platform.asked == ["a"]
    hint = "grant contact:user.base:readonly"
    assert [(e["event"], e["hint"]) for e in logs] == [("sender_names_not_permitted", hint)]
    clock.now += 601
    assert await names.name("b") == "乙"


async def test_a_person_who_cannot_be_named_is_remembered_as_unnamed_like_a_name() -> None:
    platform, clock = Platform({}), Clock()
    platform.fail = [NameUnknown("person", "errcode 60011", "visible range")]
    names = directory(platform, clock, ttl_s=86400)
    assert await names.name("outsider") is None
    clock.now += 3600
    assert await names.name("outsider") is None
    assert platform.asked == ["outsider"]


async def test_the_cache_is_bounded_dropping_the_least_recently_used() -> None:
    platform, clock = Platform({f"u{i}": f"name{i}" for i in range(5)}), Clock()
    names = NameDirectory(platform.lookup, channel="feishu", cred_id="x", clock=clock, max_names=3)
    for i in range(4):
        await names.name(f"u{i}")
    assert names.cached("u0") == (False, None)  # the oldest went
    assert names.cached("u3") == (True, "name3")


@pytest.mark.parametrize(
    ("raw", "shown"), [("  王小明 ", "王小明"), ("a\nb", "a b"), ("", None), ("x" * 100, "x" * 64)]
)
async def test_a_name_is_one_trimmed_line_of_bounded_length(raw: str, shown: str | None) -> None:
    names = directory(Platform({"u": raw}), Clock())
    assert await names.name("u") == shown


async def test_closing_ends_lookups_under_way_and_waiting_callers_get_the_id() -> None:
    platform, clock = Platform({"u": "name"}), Clock()
    platform.gate = asyncio.Event()
    names = directory(platform, clock, wait_s=5.0)
    waiting = asyncio.create_task(names.name("u"))
    await asyncio.sleep(0.02)
    await names.close()
    assert await waiting is None
    assert await names.name("other") is None and platform.asked == ["u"]
