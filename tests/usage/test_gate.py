"""The budget gate with the usage writer's writes ordered by the test: a finished turn counts once in the next check,
whichever of its usage and its settlement the writer stored first, also while the settlement's write is under way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from zoneinfo import ZoneInfo

import pytest

from agenthub.agent.definition import AgentConfig, AgentDefinition
from agenthub.clock import system_clock
from agenthub.config import Settings
from agenthub.hosting.app import open_stores
from agenthub.llm.types import CallOwner, LLMRequest, LLMResponse
from agenthub.messages import InboundMessage, Usage
from agenthub.storage.ports import UsageStore
from agenthub.storage.usage import UsageRow
from agenthub.usage.admission import Admission
from agenthub.usage.gate import BudgetGate
from agenthub.usage.periods import day_of
from agenthub.usage.recorder import UsageRecorder
from tests.support.budgets import store_of

LIMIT = 8000
SPENT = 2050  # a turn with tool steps: 2,000 prompt tokens and 50 out
ESTIMATE = 2203  # the next turn's estimate: the last call's prompt, the message and `max_tokens`
AGENT = AgentDefinition("default", AgentConfig(), "You are a test assistant.")
MESSAGE = InboundMessage("wecom", "dm", "alice", "question")


class HeldReleases:
    """The store the recorder writes to, its writes that end reservations held at a barrier until `go` is set."""

    def __init__(self, store: UsageStore) -> None:
        self.store = store
        self.waiting = asyncio.Event()
        self.go = asyncio.Event()
        self.go.set()
        self.writes = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    async def add(self, rows: Sequence[UsageRow], *, release: Sequence[str] = ()) -> None:
        self.writes += 1
        if release:
            self.waiting.set()
            await self.go.wait()
        await self.store.add(rows, release=release)


@dataclass
class Bench:
    store: HeldReleases
    recorder: UsageRecorder
    gate: BudgetGate

    async def admit(self) -> Admission:
        admission = await self.gate.admit(AGENT, MESSAGE, ESTIMATE, "en", 60.0)
        assert isinstance(admission, Admission), admission  # within the budget, nothing running: admitted
        return admission

    def call(self, n: int) -> None:
        """Turn `n`'s one model call, as the provider reports it to the recorder."""
        owner = CallOwner("default", "wecom", "dm", "alice")
        request = LLMRequest("m", [], [{"role": "user", "content": f"q{n}"}], [], 200, purpose="turn", owner=owner)
        reply = LLMResponse([{"type": "text", "text": "ok"}], "end_turn", Usage(input_tokens=2000, output_tokens=50))
        self.recorder.watch(request, reply)


@asynccontextmanager
async def third_turn_ended(settings: Settings) -> AsyncIterator[Bench]:
    """alice's two earlier turns stored (4,100 tokens); her third admitted with a reservation of its own (no lease
    fits this near the limit), its call stored by the writer before the turn ended; the turn ends (settled), its
    reservation's release not written: the writer waits (for an hour here) before its next write."""
    stores = await open_stores(settings)
    zone = ZoneInfo(settings.scheduler.timezone)
    store = HeldReleases(stores.usage)
    recorder = UsageRecorder(store, zone, system_clock, gather_s=3600.0)  # type: ignore[arg-type]  # held writes
    bench = Bench(store, recorder, BudgetGate(settings.budgets, stores.usage, recorder, zone, system_clock))
    now = system_clock()
    try:
        earlier = UsageRow(
            day_of(now, zone), "turn", "default", "wecom", "dm", "alice", "m", 2 * SPENT, calls=2, at=now
        )
        await stores.usage.add([earlier])
        third = await bench.admit()
        assert third.reservation_id is not None
        bench.call(3)
        await recorder.flush()  # the writer's write of the call, made before the turn has stored its reply
        bench.gate.settle(third, SPENT)
        assert recorder.releases_waiting()
        yield bench
    finally:
        store.go.set()
        await recorder.aclose()
        await stores.aclose()


async def fourth_and_fifth(bench: Bench) -> bool:
    """alice's fourth turn (6,150 used: admitted) spends 2,050; whether her fifth (8,200 used) is refused."""
    fourth = await bench.admit()
    bench.call(4)
    bench.gate.settle(fourth, SPENT)
    await bench.gate.drain()
    return (await bench.gate.admit(AGENT, MESSAGE, ESTIMATE, "en", 60.0)).refused


@pytest.mark.parametrize("backend", ["files", "postgres"])
async def test_a_finished_turn_whose_usage_was_written_before_its_settlement_is_counted_once_by_the_next_check(
    backend: str, settings_factory: Callable[..., Settings], request: pytest.FixtureRequest
) -> None:
    """The writer stores a call's row `GATHER_S` after the call; a turn that stores its reply and settles later than
    that leaves its row written and its reservation still held until the writer's next write. A check made in
    between counted the turn twice: alice, 6,150 of 8,000 used and nothing running, was refused (issue 21)."""
    settings = settings_factory(budgets={"user_day": LIMIT}, store=store_of(backend, request))
    async with third_turn_ended(settings) as bench:
        assert await fourth_and_fifth(bench)  # the fourth admitted; the limit still holds for the fifth


@pytest.mark.parametrize("backend", ["files", "postgres"])
async def test_a_check_after_a_settled_turn_makes_no_write_of_the_usage_writer(
    backend: str, settings_factory: Callable[..., Settings], request: pytest.FixtureRequest
) -> None:
    """The turn's row is stored and its release still waits for the writer: the check leaves the reservation out
    instead of making the writer's next write first (a write per check doubled the writes per turn)."""
    settings = settings_factory(budgets={"user_day": LIMIT}, store=store_of(backend, request))
    async with third_turn_ended(settings) as bench:
        writes, waiting = bench.store.writes, bench.recorder.releases_waiting()
        fourth = await bench.admit()  # 6,150 used, nothing running: within the budget
        assert bench.store.writes == writes
        assert bench.recorder.releases_waiting() == waiting
        bench.call(4)
        bench.gate.settle(fourth, SPENT)
        assert (await bench.gate.admit(AGENT, MESSAGE, ESTIMATE, "en", 60.0)).refused  # 8,200: the limit holds


@pytest.mark.parametrize("backend", ["files", "postgres"])
async def test_a_check_made_while_the_settlements_write_is_under_way_counts_the_turn_once(
    backend: str, settings_factory: Callable[..., Settings], request: pytest.FixtureRequest
) -> None:
    """The writer has taken the turn's release into a write not committed yet (held here): the check counts the
    turn's usage, stored before, and leaves its reservation out, whether that write commits before it or not."""
    settings = settings_factory(budgets={"user_day": LIMIT}, store=store_of(backend, request))
    async with third_turn_ended(settings) as bench:
        bench.store.go.clear()
        writing = asyncio.create_task(bench.recorder.flush())  # the writer's write, under way
        await bench.store.waiting.wait()
        assert not bench.recorder.releases_waiting()
        fourth = asyncio.create_task(bench.gate.admit(AGENT, MESSAGE, ESTIMATE, "en", 60.0))
        done, _ = await asyncio.wait([fourth], timeout=1.0)  # a check that does not wait answers meanwhile
        bench.store.go.set()
        await writing
        admitted = await fourth
        assert isinstance(admitted, Admission), (done, admitted)  # 6,150 used, nothing running: within the budget
        bench.call(4)
        bench.gate.settle(admitted, SPENT)
        await bench.gate.drain()
        assert (await bench.gate.admit(AGENT, MESSAGE, ESTIMATE, "en", 60.0)).refused  # 8,200: the limit holds


async def test_two_people_in_one_group_chat_are_each_checked_against_their_own_limit(
    settings_factory: Callable[..., Settings],
) -> None:
    """The gate keeps a turn's plan per shape: a group chat's turns of two people are two shapes. Keyed without the
    sender, the first person's plan (their user scope, or none when exempt) was the next person's too."""
    settings = settings_factory(budgets={"user_day": LIMIT, "exempt": ["wecom:boss"]})
    stores = await open_stores(settings)
    zone = ZoneInfo(settings.scheduler.timezone)
    recorder = UsageRecorder(stores.usage, zone, system_clock)
    gate = BudgetGate(settings.budgets, stores.usage, recorder, zone, system_clock)
    now = system_clock()
    try:
        over = UsageRow(day_of(now, zone), "turn", "default", "wecom", "g", "alice", "m", LIMIT, calls=1, at=now)
        await stores.usage.add([over])
        in_group = {who: InboundMessage("wecom", "g", who, "question") for who in ("boss", "alice", "bob")}
        assert isinstance(await gate.admit(AGENT, in_group["boss"], ESTIMATE, "en", 60.0), Admission)  # exempt
        assert (await gate.admit(AGENT, in_group["alice"], ESTIMATE, "en", 60.0)).refused  # over her own limit
        bob = await gate.admit(AGENT, in_group["bob"], ESTIMATE, "en", 60.0)  # nothing used: within his
        assert isinstance(bob, Admission), bob
    finally:
        await recorder.aclose()
        await stores.aclose()
