"""Several instances on one deployment: L3, AutoCompact and the scheduler run on exactly one at a time."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from agenthub.clock import ManualClock
from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import Services, build_services
from agenthub.memory.wiring import AUTOCOMPACT_TIMER, L3_TIMER
from agenthub.scheduler.wiring import pause_scheduler, start_scheduler, stop_scheduler
from agenthub.session_keys import SessionKey
from agenthub.storage.lease import InProcessLeases
from agenthub.storage.singleton import InstanceLeases
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, reply_text
from tests.support.leases import InstanceView
from tests.support.memory import is_summary_request, msg, seed
from tests.support.roots import make_settings

LEASE_S = 15.0
INTERVAL_S = 0.02  # the timers run on real time; the leases on a ManualClock the test moves


class Deployment:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.clock = ManualClock()
        self.leases = InProcessLeases(clock=self.clock)
        self.views: list[InstanceView] = []
        self.gateways: list[GatewayCore] = []
        self.services: list[Services] = []
        self.stacks: list[AsyncExitStack] = []

    async def start_instance(self) -> GatewayCore:
        view = InstanceView(self.leases)
        leases = InstanceLeases(view, holder=f"instance-{len(self.gateways)}", ttl_s=LEASE_S, clock=self.clock)
        stack = AsyncExitStack()
        services = await stack.enter_async_context(build_services(self.settings, leases=leases))
        gateway = services.gateway
        self.views.append(view)
        self.gateways.append(gateway)
        self.services.append(services)
        self.stacks.append(stack)
        return gateway

    async def stop_instance(self, n: int) -> None:
        await self.stacks[n].aclose()

    def ticks(self, timer: str) -> list[int]:
        return [gw.timers[timer].ticks for gw in self.gateways]

    def running(self, timer: str) -> list[bool]:
        return [gw.timers[timer].started for gw in self.gateways]

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        for _ in range(30):
            await asyncio.sleep(0)


@asynccontextmanager
async def deployment(
    tmp_path: Path, llm_base_url: str | None = None, *, memory: dict[str, Any] | None = None, **overrides: Any
) -> AsyncIterator[Deployment]:
    timers = {"l3_interval_s": INTERVAL_S, "autocompact_interval_s": INTERVAL_S}
    d = Deployment(make_settings(tmp_path, llm_base_url, memory={**timers, **(memory or {})}, **overrides))
    try:
        yield d
    finally:
        for stack in reversed(d.stacks):
            await stack.aclose()


async def wait_until(condition: Callable[[], bool]) -> None:
    """Wait for timer ticks and starts in other tasks (no event marks them); a bound, not a measurement."""
    async with asyncio.timeout(10):
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def test_with_three_instances_only_the_lease_holder_runs_l3_and_autocompact(tmp_path: Path) -> None:
    async with deployment(tmp_path) as d:
        for _ in range(3):
            await d.start_instance()
        await wait_until(lambda: d.ticks(L3_TIMER)[0] >= 5 and d.ticks(AUTOCOMPACT_TIMER)[0] >= 5)
        for timer in (L3_TIMER, AUTOCOMPACT_TIMER):
            assert d.running(timer) == [True, False, False]
            assert d.ticks(timer)[1:] == [0, 0]  # one run per interval: the leader's, nobody else's


async def test_a_leader_that_stops_hands_the_timers_over_at_the_next_attempt(tmp_path: Path) -> None:
    async with deployment(tmp_path) as d:
        for _ in range(3):
            await d.start_instance()
        await d.stop_instance(0)  # a clean stop releases the leases
        await d.advance(LEASE_S / 3)  # the standbys' next attempt, not the lease's expiry
        for timer in (L3_TIMER, AUTOCOMPACT_TIMER):
            assert sum(d.running(timer)[1:]) == 1
        leader = d.running(L3_TIMER).index(True)
        await wait_until(lambda: d.ticks(L3_TIMER)[leader] >= 3)
        assert d.ticks(L3_TIMER)[3 - leader] == 0


async def test_a_leader_cut_off_from_the_store_stops_before_a_standby_takes_over_within_lease_s(
    tmp_path: Path,
) -> None:
    async with deployment(tmp_path) as d:
        for _ in range(3):
            await d.start_instance()
        d.views[0].down = True  # the leader can no longer renew (its process hangs, or its network is gone)
        waited = 0.0
        while not any(d.running(L3_TIMER)[1:]):
            assert waited < LEASE_S + LEASE_S / 3, "no standby took over within lease_s"
            await d.advance(LEASE_S / 6)
            waited += LEASE_S / 6
            for timer in (L3_TIMER, AUTOCOMPACT_TIMER):
                assert sum(d.running(timer)) <= 1, d.running(timer)  # never two at once, at any step
        assert not d.running(L3_TIMER)[0] and not d.running(AUTOCOMPACT_TIMER)[0]
        leader = d.running(L3_TIMER).index(True)
        before = d.ticks(L3_TIMER)[0]
        await wait_until(lambda: d.ticks(L3_TIMER)[leader] >= 3)
        assert d.ticks(L3_TIMER)[0] == before  # the old leader runs no more intervals
        d.views[0].down = False


async def test_with_three_instances_one_scheduler_fires_and_a_standby_takes_it_over(tmp_path: Path) -> None:
    async with deployment(tmp_path, scheduler={"enabled": True}) as d:
        for _ in range(3):
            await d.start_instance()
        instances = d.services
        for services in instances:
            await start_scheduler(services, [])
        assert [s.scheduler is not None and s.scheduler.running for s in instances] == [True, False, False]
        await pause_scheduler(instances[0])  # shutdown begins: no more runs here, the lease is released
        await stop_scheduler(instances[0])
        await d.advance(LEASE_S / 3)  # the standbys' next attempt; the lease clock stands still while we wait
        await wait_until(lambda: any(s.scheduler is not None and s.scheduler.running for s in instances[1:]))
        assert [s.scheduler is not None and s.scheduler.running for s in instances].count(True) == 1
        for services in instances[1:]:
            await pause_scheduler(services)
        assert not any(s.scheduler is not None and s.scheduler.running for s in instances)


def _age(gw: GatewayCore, key: SessionKey, seconds: float = 1200) -> None:
    path = gw.history.layout(key.agent).history_file(key)
    then = time.time() - seconds
    os.utime(path, (then, then))


async def test_an_autocompact_summary_in_flight_is_cancelled_when_the_lease_is_lost(
    tmp_path: Path, fake_llm: FakeAnthropic
) -> None:
    never = asyncio.Event()  # the old leader's summary is never answered: only a cancellation ends it
    summaries: list[dict[str, Any]] = []

    def respond(body: dict[str, Any]) -> ScriptedReply | None:
        if not is_summary_request(body):
            return None
        summaries.append(body)
        return reply_text("idle summary", hold=never if len(summaries) == 1 else None)

    fake_llm.responder = respond
    memory = {"l3_interval_s": 3600.0, "flush_before_compaction": False}
    llm = {"timeout_s": 60.0}  # no client timeout ends the held call meanwhile
    async with deployment(tmp_path, fake_llm.base_url, memory=memory, llm=llm) as d:
        write_agent(d.settings.agents_dir, "default", {"memory": {"autocompact_summary": True}})
        old, new = await d.start_instance(), await d.start_instance()
        key = old.resolve_key(msg("x"))[1]
        await seed(old, key, 75)
        _age(old, key)
        (held,) = await fake_llm.wait_for_requests(1, timeout_s=30)  # the leader's sweep summarises the session
        task = old.background(key)
        assert task is not None

        d.views[0].down = True  # the leader is cut off: it stops before a standby may gain the lease
        while d.running(AUTOCOMPACT_TIMER)[0]:
            await d.advance(LEASE_S / 6)
        assert task.done() and old.background(key) is None  # the summary ended with the sweep
        await asyncio.wait_for(held.disconnected.wait(), 5)  # and its model call was cancelled
        history_file = old.history.layout(key.agent).history_file(key)
        assert len(history_file.read_text(encoding="utf-8").splitlines()) == 150  # the session is intact

        while not d.running(AUTOCOMPACT_TIMER)[1]:
            await d.advance(LEASE_S / 6)
        await wait_until(lambda: len(summaries) == 2 and new.background(key) is None)
        never.set()  # were the old call still alive, its answer would come now
        for _ in range(30):
            await asyncio.sleep(0)
        history = await new.history.load(key)
        assert len(history) == 21 and history[0]["content"] == "[历史摘要]\nidle summary"
        archived = await new.history.archived(key)
        assert [m["content"] for m in archived] == [f"{kind} {i}" for i in range(65) for kind in ("question", "answer")]
        assert len(summaries) == 2  # the new leader compacted once, the old one never
        d.views[0].down = False
