"""The budget gate with the usage writer's writes ordered by the test: a finished turn counts once in the next check,
whichever of its usage and its settlement the writer stored first."""

from __future__ import annotations

from collections.abc import Callable
from zoneinfo import ZoneInfo

import pytest

from agenthub.agent.definition import AgentConfig, AgentDefinition
from agenthub.clock import system_clock
from agenthub.config import Settings
from agenthub.hosting.app import open_stores
from agenthub.llm.types import CallOwner, LLMRequest, LLMResponse
from agenthub.messages import InboundMessage, Usage
from agenthub.storage.usage import UsageRow
from agenthub.usage.gate import Admission, BudgetGate
from agenthub.usage.periods import day_of
from agenthub.usage.recorder import UsageRecorder
from tests.support.budgets import store_of

LIMIT = 8000
SPENT = 2050  # a turn with tool steps: 2,000 prompt tokens and 50 out
ESTIMATE = 2203  # the next turn's estimate: the last call's prompt, the message and `max_tokens`
AGENT = AgentDefinition("default", AgentConfig(), "You are a test assistant.")


def _call(n: int) -> tuple[LLMRequest, LLMResponse]:
    """Turn `n`'s one model call, as the provider reports it to the recorder."""
    owner = CallOwner("default", "wecom", "dm", "alice")
    request = LLMRequest("m", [], [{"role": "user", "content": f"question {n}"}], [], 200, purpose="turn", owner=owner)
    reply = LLMResponse([{"type": "text", "text": "ok"}], "end_turn", Usage(input_tokens=2000, output_tokens=50))
    return request, reply


@pytest.mark.parametrize("backend", ["files", "postgres"])
async def test_a_finished_turn_whose_usage_was_written_before_its_settlement_is_counted_once_by_the_next_check(
    backend: str, settings_factory: Callable[..., Settings], request: pytest.FixtureRequest
) -> None:
    """The writer stores a call's row `GATHER_S` after the call; a turn that stores its reply and settles later than
    that leaves its row written and its reservation still held until the writer's next write. A check made in
    between counted the turn twice: alice, 6,150 of 8,000 used and nothing running, was refused (issue 21)."""
    settings = settings_factory(budgets={"user_day": LIMIT}, store=store_of(backend, request))
    stores = await open_stores(settings)
    zone = ZoneInfo(settings.scheduler.timezone)
    recorder = UsageRecorder(stores.usage, zone, system_clock, gather_s=3600.0)  # writes only when flushed here
    gate = BudgetGate(settings.budgets, stores.usage, recorder, zone, system_clock)
    message = InboundMessage("wecom", "dm", "alice", "question")
    now = system_clock()
    try:
        day = day_of(now, zone)
        earlier = UsageRow(day, "turn", "default", "wecom", "dm", "alice", "m", input=2 * SPENT, calls=2, at=now)
        await stores.usage.add([earlier])  # two turns before, written and settled
        third = await gate.admit(AGENT, message, ESTIMATE, "en", 60.0)
        assert isinstance(third, Admission) and third.reservation_id is not None  # near the limit: its own
        recorder.watch(*_call(3))
        await recorder.flush()  # the writer's write of the call, made before the turn has stored its reply
        gate.settle(third, SPENT)  # the turn ends: its reservation goes with the writer's next write, not yet made
        assert recorder.releases_waiting()
        fourth = await gate.admit(AGENT, message, ESTIMATE, "en", 60.0)
        assert isinstance(fourth, Admission), fourth  # 6,150 used, nothing running: within the budget
        recorder.watch(*_call(4))
        gate.settle(fourth, SPENT)
        await gate.drain()
        fifth = await gate.admit(AGENT, message, ESTIMATE, "en", 60.0)
        await recorder.aclose()
    finally:
        await stores.aclose()
    assert fifth.refused  # 8,200 used: the limit still holds
