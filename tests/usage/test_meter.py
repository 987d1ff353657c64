"""What budgets cost, as the gate reports it: the CPU of its checks, estimates, settlements and the writes that only
end reservations (the figure `bench/bench_budget.py` reads the ≤ 5 % target from)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from agenthub.config import Settings
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent, ErrorCode, ErrorEvent, InboundMessage
from agenthub.usage.meter import CpuMeter
from tests.support.fakes.anthropic import FakeAnthropic


def test_the_meter_counts_cpu_spent_in_a_section_and_not_time_spent_waiting() -> None:
    meter = CpuMeter()
    with meter.measure():
        busy(0.03)
    spent = meter.seconds
    with meter.measure():
        time.sleep(0.1)  # waiting costs no CPU
    assert 0.03 <= spent < 0.1
    assert meter.seconds - spent < 0.02
    assert meter.sections == 2


async def test_a_run_counts_its_own_steps_and_not_what_other_tasks_do_while_it_waits() -> None:
    meter = CpuMeter()
    waiting = asyncio.Event()

    async def section() -> str:
        busy(0.01)  # its own work: counted
        await waiting.wait()  # meanwhile another task burns 50 ms: not counted
        busy(0.01)
        return "done"

    async def other() -> None:
        await asyncio.sleep(0)
        busy(0.05)
        waiting.set()

    result, _ = await asyncio.gather(meter.run(section()), other())
    assert result == "done"
    assert 0.02 <= meter.seconds < 0.05
    assert meter.sections == 1


async def test_a_cancelled_run_passes_the_cancellation_on_and_counts_what_ran() -> None:
    meter = CpuMeter()
    seen: list[str] = []

    async def section() -> None:
        busy(0.01)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    task = asyncio.create_task(meter.run(section()))
    await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.wait([task])
    assert task.cancelled()
    assert seen == ["cancelled"]
    assert meter.seconds >= 0.01


def busy(seconds: float) -> None:
    """Spend `seconds` of this thread's CPU."""
    began = time.thread_time()
    while time.thread_time() - began < seconds:
        pass


async def test_turns_under_budgets_report_the_gates_cpu_and_turns_without_none(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory(budgets={"user_day": 10**9, "exempt": ["wecom:boss"]})
    async with build_gateway(settings) as gw:
        assert gw.turn_services.usage is not None
        gate = gw.turn_services.usage.gate
        for n in range(3):
            final = await (await gw.submit(InboundMessage("wecom", "dm", "alice", f"question {n}"))).result()
            assert isinstance(final, DoneEvent)
        await gate.drain()
        checked_sections, checked_cpu = gate.cpu.sections, gate.cpu_seconds
        final = await (await gw.submit(InboundMessage("wecom", "dm-boss", "boss", "exempt"))).result()
        assert isinstance(final, DoneEvent)
        await gate.drain()
        exempt_sections = gate.cpu.sections - checked_sections
        gate.leases.close()  # alice's lease ends: its release is a write of its own
        await gate.drain()
    # each checked turn: whether budgets apply, its estimate, the admission and the settlement; the first turn's
    # estimate looks at the cache (`SessionHistory.peek_now`) and, its session not loaded yet, is made from the read
    # (`peek`) the turn makes a step early (its first append reads the same): the read itself is not the gate's
    assert checked_sections == 3 * 4 + 1
    assert checked_cpu > 0
    assert exempt_sections == 1  # an exempt sender's turn only asks whether budgets apply
    assert gw.turn_services.usage.recorder.release_cpu.sections == 1


async def test_a_turn_admitted_from_its_lease_starts_no_task_a_turn_without_budgets_does_not(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    """The estimate's read of the history and meta (`SessionHistory.peek`) makes no task of its own (`get_meta`'s
    `run_to_end` made one a turn, and a wait the gate's meter did not see)."""

    async def tasks_per_turn(budgets: dict[str, int]) -> list[int]:
        async with build_gateway(settings_factory(budgets=budgets)) as gw:
            started = 0
            loop = asyncio.get_running_loop()

            def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
                nonlocal started
                started += 1
                return asyncio.Task(coro, loop=loop, **kwargs)

            counts = []
            for n in range(4):
                if n == 2:  # the first turns (a new session, the lease asked for) counted apart
                    loop.set_task_factory(counting)
                before = started
                final = await (await gw.submit(InboundMessage("wecom", "dm", "alice", f"question {n}"))).result()
                assert isinstance(final, DoneEvent)
                counts.append(started - before)
            loop.set_task_factory(None)
            if gw.turn_services.usage is not None:
                await gw.turn_services.usage.gate.drain()
            return counts[2:]

    assert await tasks_per_turn({"user_day": 10**9}) == await tasks_per_turn({})


async def test_a_refused_turns_read_of_its_history_is_counted_as_the_gates(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    """The estimate's read of a history the cache does not hold is the turn's own (its first append reads the same)
    unless the turn is refused: then it was made for budgets alone, and counted with the gate's CPU."""
    settings = settings_factory()
    async with build_gateway(settings) as gw:  # alice's chat has a history on disk
        final = await (await gw.submit(InboundMessage("wecom", "dm", "alice", "question 0"))).result()
        assert isinstance(final, DoneEvent)
    limited = settings.model_copy(update={"budgets": settings.budgets.model_copy(update={"user_day": 1})})
    async with build_gateway(limited) as gw:  # a new process: the history is not in the cache
        assert gw.turn_services.usage is not None
        gate = gw.turn_services.usage.gate
        final = await (await gw.submit(InboundMessage("wecom", "dm", "alice", "question 1"))).result()
        assert isinstance(final, ErrorEvent) and final.code == ErrorCode.BUDGET_EXCEEDED
    # whether budgets apply, the look at the cache, the estimate, the admission, and the read it was made from
    assert gate.cpu.sections == 5
    assert len(fake_llm.message_requests()) == 1
