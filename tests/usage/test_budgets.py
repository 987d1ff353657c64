"""Budgets: a turn over a limit is refused before any model call; concurrent turns overspend by at most one
reservation; the warning comes once per period; the day and the month roll over at local midnight."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from agenthub.clock import ManualClock
from agenthub.config import Settings
from agenthub.errors import ConfigError
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway
from agenthub.llm.tokens import estimate_text_tokens
from agenthub.messages import DoneEvent, ErrorEvent, InboundMessage, NoticeEvent, ReplyEvent
from tests.support.budgets import MAX_TOKENS, PER_CALL, settle_all, used_by
from tests.support.fakes.anthropic import FakeAnthropic, reply_text


def budget_settings(factory: Callable[..., Settings], **budgets: Any) -> Settings:
    return factory(budgets=budgets, llm={"max_tokens": MAX_TOKENS})


@pytest.mark.parametrize("backend", ["files", "postgres"])
async def test_32_concurrent_turns_of_one_person_overspend_by_at_most_one_reservation(
    backend: str, settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, request: pytest.FixtureRequest
) -> None:
    store = {"backend": "postgres", "dsn": request.getfixturevalue("postgres_dsn")} if backend == "postgres" else {}
    limit = 1000
    settings = settings_factory(budgets={"user_day": limit}, llm={"max_tokens": MAX_TOKENS}, store=store)
    fake_llm.default_usage = PER_CALL
    from agenthub.hosting.app import open_stores

    stores = await open_stores(settings)
    try:
        async with build_gateway(settings, stores=stores) as gw:
            for wave in range(3):  # each wave starts where the last one left off: at the edge, then past it
                hold = asyncio.Event()
                fake_llm.responder = lambda body, hold=hold: reply_text("ok", hold=hold)
                before = len(fake_llm.message_requests())
                handles = [
                    await gw.submit(InboundMessage("wecom", f"chat-{wave}-{n}", "alice", f"question {n}"))
                    for n in range(32)
                ]
                finals = await settle_all(handles, fake_llm, hold)
                refused = [f for f in finals if isinstance(f, ErrorEvent) and f.code == "budget_exceeded"]
                answered = [f for f in finals if isinstance(f, DoneEvent)]
                assert len(refused) + len(answered) == 32
                assert len(fake_llm.message_requests()) - before == len(answered)  # refused: no model call
                assert refused, "the limit was reached"
                assert gw.turn_services.usage is not None
                await gw.turn_services.usage.gate.drain()  # the settlements written: the next wave sees the real usage
            used = await used_by(gw, "alice")
    finally:
        await stores.aclose()
    reservation = MAX_TOKENS + 1 + estimate_text_tokens("question 31")
    assert limit <= used <= limit + reservation


async def test_the_refusal_names_the_limit_and_when_it_resets_in_the_chat_locale(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = budget_settings(settings_factory, chat_month=100)
    clock = ManualClock(1_764_777_600.0)  # 2025-12-04 00:00 Asia/Shanghai (16:00 UTC the day before)
    fake_llm.default_usage = PER_CALL
    async with build_gateway(settings, clock=clock) as gw:
        assert isinstance(await (await gw.submit(InboundMessage("wecom", "g", "a", "one"))).result(), DoneEvent)
        await used_by(gw, "a")
        zh = await (await gw.submit(InboundMessage("wecom", "g", "b", "two"))).result()
        en = await (await gw.submit(InboundMessage("cli", "g", "c", "three"))).result()
        cli_once = await (await gw.submit(InboundMessage("cli", "g", "c", "four"))).result()
    assert isinstance(zh, ErrorEvent) and zh.code == "budget_exceeded"
    assert "本会话的每月用量额度（100 tokens）已用完" in zh.message
    assert "2026-01-01 00:00 (Asia/Shanghai)" in zh.message
    assert isinstance(en, DoneEvent)  # the CLI chat "g" is another chat
    assert isinstance(cli_once, ErrorEvent)
    assert "This chat's monthly usage budget (100 tokens) is used up" in cli_once.message
    assert len(fake_llm.message_requests()) == 2


async def test_the_warning_comes_once_per_period(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = budget_settings(settings_factory, user_day=2000, warn_at=0.5)
    fake_llm.default_usage = PER_CALL  # 150 a turn; a reservation ~ 200 + the prompt
    clock = ManualClock(1_764_777_600.0 + 3600)
    async with build_gateway(settings, clock=clock) as gw:

        async def notices(n: int) -> list[str]:
            events = [e async for e in await gw.submit(InboundMessage("cli", "c", "me", f"m{n}"))]
            assert isinstance(events[-1], DoneEvent)
            assert gw.turn_services.usage is not None
            await gw.turn_services.usage.gate.drain()
            return [e.text for e in events if isinstance(e, NoticeEvent)]

        seen = [await notices(n) for n in range(6)]
        warned = [n for n, texts in enumerate(seen) if any("50%" in t or "budget" in t for t in texts)]
        assert len(warned) == 1, seen
        clock.advance(86400)  # the next day: a new period, a new warning when crossed again
        seen = [await notices(n) for n in range(6, 12)]
        assert sum(1 for texts in seen if texts) == 1, seen


async def test_the_day_rolls_over_at_local_midnight_and_the_month_at_its_end(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = budget_settings(settings_factory, user_day=300, user_month=600)
    fake_llm.default_usage = {"input_tokens": 200, "output_tokens": 100}  # 300 a turn: one turn fills a day
    shanghai_2359 = 1_767_196_740.0  # 2025-12-31 23:59 in Asia/Shanghai = 15:59 UTC
    clock = ManualClock(shanghai_2359 - 86400)  # 2025-12-30 23:59

    async def ask(gw: GatewayCore, text: str) -> ReplyEvent:
        final = await (await gw.submit(InboundMessage("cli", "c", "me", text))).result()
        assert gw.turn_services.usage is not None
        await gw.turn_services.usage.gate.drain()
        return final

    async with build_gateway(settings, clock=clock) as gw:
        assert isinstance(await ask(gw, "dec 30"), DoneEvent)
        day_full = await ask(gw, "dec 30 again")
        assert isinstance(day_full, ErrorEvent) and "daily" in day_full.message
        assert "2025-12-31 00:00" in day_full.message
        clock.advance(120)  # 2025-12-31 00:01 local: a new day, the same month
        assert isinstance(await ask(gw, "dec 31"), DoneEvent)
        month_full = await ask(gw, "dec 31 again")
        assert isinstance(month_full, ErrorEvent)
        assert "daily" in month_full.message or "monthly" in month_full.message
        clock.advance(86400)  # 2026-01-01 00:01 local (still 2025-12-31 in UTC): a new month
        assert isinstance(await ask(gw, "jan 1"), DoneEvent)
        assert gw.turn_services.usage is not None
        rows = await gw.turn_services.usage.store.days("2025-01-01", "2026-12-31")
    assert sorted({r.day for r in rows}) == ["2025-12-30", "2025-12-31", "2026-01-01"]


async def test_exempt_senders_are_counted_but_never_refused(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = budget_settings(settings_factory, user_day=10, exempt=["cli:boss"])
    async with build_gateway(settings) as gw:
        for n in range(3):
            assert isinstance(await (await gw.submit(InboundMessage("cli", "c", "boss", f"m{n}"))).result(), DoneEvent)
        assert await used_by(gw, "boss", "cli") > 10


async def test_an_agent_json_override_applies_to_that_agent_only(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = budget_settings(settings_factory)
    agent_dir = settings.agents_dir / "tight"
    agent_dir.mkdir(parents=True)
    (agent_dir / "agent.json").write_text('{"budgets": {"agent_day": 1}}', encoding="utf-8")
    (agent_dir / "AGENTS.md").write_text("You are tight.", encoding="utf-8")
    async with build_gateway(settings) as gw:
        first = await (await gw.submit(InboundMessage("cli", "c", "me", "hi", agent="tight"))).result()
        await used_by(gw, "me", "cli")
        second = await (await gw.submit(InboundMessage("cli", "c", "me", "hi", agent="tight"))).result()
        free = await (await gw.submit(InboundMessage("cli", "c", "me", "hi"))).result()
    assert isinstance(first, DoneEvent)
    assert isinstance(second, ErrorEvent) and second.code == "budget_exceeded"
    assert isinstance(free, DoneEvent)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"AGENTHUB_BUDGETS__USER_DAY": "-5"}, "budgets.user_day"),
        ({"AGENTHUB_BUDGETS__CHAT_MONTH": "lots"}, "budgets.chat_month"),
        ({"AGENTHUB_BUDGETS__USER_WEEK": "5"}, "budgets.user_week"),
        ({"AGENTHUB_LLM__PRICES": '{"m": {"input": -1}}'}, "llm.prices.m.input"),
    ],
)
def test_bad_budget_settings_stop_start_up_naming_the_key(
    env: dict[str, str], named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agenthub.config import load_settings

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    assert named in str(caught.value)
    assert "\n" not in str(caught.value)


def test_budgets_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from agenthub.config import load_settings

    monkeypatch.setenv("AGENTHUB_BUDGETS__USER_DAY", "50000")
    assert load_settings().budgets.user_day == 50000
