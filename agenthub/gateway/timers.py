"""Periodic jobs owned by the gateway's lifecycle: started with it, stopped with it, never killed by one bad tick;
a deployment singleton's timer runs only while this instance holds its lease."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog

from agenthub.storage.singleton import InstanceLeases, Singleton

log = structlog.get_logger(__name__)

Tick = Callable[[], Awaitable[None]]


class Timer:
    """Calls `tick` every `interval_s` seconds; a failing tick is logged and the timer goes on.

    `tick_now()` runs one tick immediately (for tests and manual triggers); ticks never overlap. `at_start`: the
    first tick runs as soon as the timer starts, not one interval later.
    """

    def __init__(self, name: str, interval_s: float, tick: Tick, *, at_start: bool = False) -> None:
        self.name = name
        self.interval_s = interval_s
        self.at_start = at_start
        self._tick = tick
        self._task: asyncio.Task[None] | None = None
        self._running = asyncio.Lock()
        self.ticks = 0
        self.failures = 0

    @property
    def started(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name=f"timer:{self.name}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def tick_now(self) -> None:
        """Run one tick now and wait for it; errors are logged, not raised."""
        async with self._running:
            self.ticks += 1
            try:
                await self._tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.failures += 1
                log.exception("timer_tick_failed", timer=self.name)

    async def _loop(self) -> None:
        if self.at_start:
            await self.tick_now()
        while True:
            await asyncio.sleep(self.interval_s)
            await self.tick_now()


class TimerRegistry:
    """The gateway's timers; stopped in reverse order of start. A timer added with `lease` runs on one instance
    of the deployment at a time: started when this instance gains the lease, stopped when it loses it."""

    def __init__(self, leases: InstanceLeases | None = None) -> None:
        self._leases = leases or InstanceLeases()
        self._timers: dict[str, Timer] = {}
        self._singletons: dict[str, Singleton] = {}
        self._started = False

    def add(
        self, name: str, interval_s: float, tick: Tick, *, lease: str | None = None, at_start: bool = False
    ) -> Timer:
        if name in self._timers:
            raise ValueError(f"timer {name!r} is already registered")
        if lease is not None and self._started:
            raise RuntimeError(f"timer {name!r}: a timer under a lease is added before the timers start")
        timer = Timer(name, interval_s, tick, at_start=at_start)
        self._timers[name] = timer
        if lease is not None:
            self._singletons[name] = self._leases.singleton(lease, start=_starter(timer), stop=timer.stop)
        elif self._started:
            timer.start()
        return timer

    def __getitem__(self, name: str) -> Timer:
        return self._timers[name]

    def __contains__(self, name: object) -> bool:
        return name in self._timers

    def singleton(self, name: str) -> Singleton | None:
        """The lease a timer runs under (None: it runs on every instance)."""
        return self._singletons.get(name)

    async def start(self) -> None:
        """Start every timer; one under a lease starts here only if this instance gains it now (else later)."""
        self._started = True
        for name, timer in self._timers.items():
            singleton = self._singletons.get(name)
            if singleton is None:
                timer.start()
            else:
                await singleton.open()

    async def stop(self) -> None:
        self._started = False
        for name, timer in reversed(list(self._timers.items())):
            singleton = self._singletons.get(name)
            if singleton is None:
                await timer.stop()
            else:
                await singleton.close()  # the timer stops, then the lease goes to a standby


def _starter(timer: Timer) -> Callable[[], Awaitable[None]]:
    async def start() -> None:
        timer.start()

    return start
