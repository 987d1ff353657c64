"""Singleton: the work runs only while the lease is held; a standby starts only once the holder has stopped."""

from __future__ import annotations

import asyncio

import pytest

from agenthub.clock import ManualClock
from agenthub.storage.lease import InProcessLeases
from agenthub.storage.singleton import InstanceLeases, Singleton, instance_holder
from tests.support.leases import DownableLeases

TTL_S = 15.0


class Work:
    """A start/stop pair that records what ran; `stop` can be held at a gate."""

    def __init__(self, name: str, events: list[str]) -> None:
        self.name, self.events = name, events
        self.stop_gate: asyncio.Event | None = None
        self.failing_starts = 0
        self.failing_stops = 0

    async def start(self) -> None:
        if self.failing_starts:
            self.failing_starts -= 1
            raise RuntimeError("cannot start")
        self.events.append(f"{self.name}+")

    async def stop(self) -> None:
        if self.stop_gate is not None:
            await self.stop_gate.wait()
        self.events.append(f"{self.name}-")
        if self.failing_stops:
            self.failing_stops -= 1
            raise RuntimeError("stopped with an error")


async def settle() -> None:
    for _ in range(30):
        await asyncio.sleep(0)


def instance(store: InProcessLeases, clock: ManualClock, work: Work) -> Singleton:
    leases = InstanceLeases(store, holder=work.name, ttl_s=TTL_S, clock=clock)
    return leases.singleton("memory-l3", start=work.start, stop=work.stop)


async def test_of_three_instances_one_runs_and_a_standby_starts_only_after_the_holder_has_stopped() -> None:
    clock = ManualClock()
    store = InProcessLeases(clock=clock)
    events: list[str] = []
    works = [Work(name, events) for name in "abc"]
    singletons = [instance(store, clock, w) for w in works]
    for s in singletons:
        await s.open()
    await settle()
    assert [s.running for s in singletons] == [True, False, False] and events == ["a+"]
    works[0].stop_gate = asyncio.Event()
    closing = asyncio.create_task(singletons[0].close())
    await settle()
    clock.advance(TTL_S / 3)  # the standbys try again while the holder is still stopping
    await settle()
    assert events == ["a+"] and not any(s.running for s in singletons[1:])
    works[0].stop_gate.set()
    await closing
    clock.advance(TTL_S / 3)  # released: the next attempt of a standby takes it, no expiry to wait for
    await settle()
    assert events[:2] == ["a+", "a-"] and len(events) == 3 and sum(s.running for s in singletons) == 1
    for s in singletons[1:]:
        await s.close()
    assert events[3:] == [events[2].replace("+", "-")]


async def test_a_holder_that_cannot_reach_the_store_stops_before_its_lease_can_go_to_another() -> None:
    clock = ManualClock()
    store = DownableLeases(clock)
    events: list[str] = []
    work = Work("a", events)
    single = InstanceLeases(store, holder="a", ttl_s=TTL_S, clock=clock).singleton(
        "scheduler", start=work.start, stop=work.stop
    )
    await single.open()
    await settle()
    assert single.running
    store.down = True  # the instance cannot renew; its lease stays in the store until it expires
    for _ in range(2):
        clock.advance(TTL_S / 3)
        await settle()
    assert not single.running and events == ["a+", "a-"]
    store.down = False
    assert await store.acquire("scheduler", "b", ttl_s=TTL_S) is None  # stopped while no standby could start
    await single.close()


async def test_close_cancelled_while_the_work_stops_propagates_and_does_not_release_the_lease() -> None:
    clock = ManualClock()
    store = InProcessLeases(clock=clock)
    work = Work("a", [])
    single = instance(store, clock, work)
    await single.open()
    await settle()
    work.stop_gate = asyncio.Event()
    closing = asyncio.create_task(single.close())
    await settle()
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert await store.acquire("memory-l3", "b", ttl_s=TTL_S) is None  # left to expire: the work may still run


async def test_a_start_that_fails_is_tried_again_while_the_lease_is_held() -> None:
    clock = ManualClock()
    store = InProcessLeases(clock=clock)
    events: list[str] = []
    work = Work("a", events)
    work.failing_starts = 1
    single = instance(store, clock, work)
    await single.open()
    await settle()
    assert not single.running and events == ["a-"]  # the failed start was undone
    clock.advance(TTL_S / 3)
    await settle()
    assert single.running and events == ["a-", "a+"]
    await single.close()


async def test_a_stop_that_raises_does_not_end_the_singleton_for_good() -> None:
    clock = ManualClock()
    store = DownableLeases(clock)
    events: list[str] = []
    work = Work("a", events)
    work.failing_stops = 1
    single = instance(store, clock, work)
    await single.open()
    await settle()
    store.down = True
    for _ in range(2):  # the lease is given up; the work's stop raises
        clock.advance(TTL_S / 3)
        await settle()
    assert not single.running and events == ["a+", "a-"]
    store.down = False
    for _ in range(4):  # the store is back: the lease is gained again and the work restarted
        clock.advance(TTL_S / 3)
        await settle()
    assert single.running and events == ["a+", "a-", "a+"]
    await single.close()


def test_holders_of_one_process_differ() -> None:
    assert instance_holder() != instance_holder()
