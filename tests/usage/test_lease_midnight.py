"""Leases across local midnight (`scheduler.timezone`): the chat's and the agent's lease keys (one object per part a
day, shared by turn shapes) are the new day's after midnight, also at a month's end: no turn of the new day is
admitted from the old day's leases."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agenthub.clock import ManualClock
from agenthub.config import Settings
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent, InboundMessage
from tests.support.budgets import MAX_TOKENS, counted_stores, store_of
from tests.support.fakes.anthropic import FakeAnthropic

SHANGHAI_MONTH_END = 1_767_196_790.0
"""2025-12-31 23:59:50 in Asia/Shanghai (15:59:50 UTC): ten seconds before a new day and a new month there."""


@pytest.mark.parametrize("backend", ["files", "postgres"])
async def test_the_first_turns_after_local_midnight_ask_for_the_new_days_leases(
    backend: str, settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, request: pytest.FixtureRequest
) -> None:
    budgets = {"agent_month": 10**9, "chat_day": 10**9, "user_day": 10**9}
    settings = settings_factory(budgets=budgets, llm={"max_tokens": MAX_TOKENS}, store=store_of(backend, request))
    assert settings.scheduler.timezone == "Asia/Shanghai"
    clock = ManualClock(SHANGHAI_MONTH_END)
    stores, counted = await counted_stores(settings)

    async def turn(chat: str, sender: str, text: str) -> None:
        final = await (await gw.submit(InboundMessage("wecom", chat, sender, text))).result()
        assert isinstance(final, DoneEvent), final

    try:
        async with build_gateway(settings, stores=stores, clock=clock) as gw:
            await turn("group", "alice", "before midnight")
            await turn("group", "bob", "before midnight too")  # the chat's and agent's leases of Dec 31
            calls_before = len(counted.asked_days)
            assert set(counted.asked_days) == {"2025-12-31"}
            clock.advance(20)  # 2026-01-01 00:00:10 local (still Dec 31 in UTC): a new day and a new month
            await turn("group", "alice", "after midnight")
            await turn("group", "bob", "after midnight too")
            await turn("dm", "carol", "after midnight as well")  # another shape: the agent's part of the new day
            after = counted.asked_days[calls_before:]
            assert after and set(after) == {"2026-01-01"}, counted.asked_days
            assert gw.turn_services.usage is not None
            gate = gw.turn_services.usage.gate
            assert {key.day for key in gate.leases._open} <= {"2025-12-31", "2026-01-01"}
            admitted = [k for k, lease in gate.leases._open.items() if k.day == "2026-01-01"]
            assert {c.scope.kind for k in admitted for c in k.claims} == {"user", "chat", "agent"}
            await gate.drain()  # the turns' usage written
            rows = await gw.turn_services.usage.store.days("2025-01-01", "2026-12-31")
    finally:
        await stores.aclose()
    assert sorted({r.day for r in rows}) == ["2025-12-31", "2026-01-01"]
