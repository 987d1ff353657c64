"""What budgets cost, as the gate reports it: the CPU of its checks, estimates, settlements and the writes that only
end reservations (the figure `bench/bench_budget.py` reads the ≤ 5 % target from)."""

from __future__ import annotations

import time
from collections.abc import Callable

from agenthub.config import Settings
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent, InboundMessage
from agenthub.usage.meter import CpuMeter
from tests.support.fakes.anthropic import FakeAnthropic


def test_the_meter_counts_cpu_spent_in_a_section_and_not_time_spent_waiting() -> None:
    meter = CpuMeter()
    with meter.measure():
        began = time.thread_time()
        while time.thread_time() - began < 0.03:  # busy: 30 ms of this thread's CPU
            pass
    busy = meter.seconds
    with meter.measure():
        time.sleep(0.1)  # waiting costs no CPU
    assert 0.03 <= busy < 0.1
    assert meter.seconds - busy < 0.02
    assert meter.sections == 2


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
    # each checked turn: whether budgets apply, its estimate, the admission and the settlement
    assert checked_sections == 3 * 4
    assert checked_cpu > 0
    assert exempt_sections == 1  # an exempt sender's turn only asks whether budgets apply
    assert gw.turn_services.usage.recorder.release_cpu.sections == 1
