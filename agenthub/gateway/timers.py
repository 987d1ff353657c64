"""Periodic jobs owned by the gateway's lifecycle: started with it, stopped with it, never killed by one bad tick."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger(__name__)

Tick = Callable[[], Awaitable[None]]


class Timer:
    """Calls `tick` every `interval_s` seconds; a failing tick is logged and the timer goes on.

    `tick_now()` runs one tick immediately (for tests and manual triggers); ticks never overlap.
    """

    def __init__(self, name: str, interval_s: float, tick: Tick) -> None:
        self.name = name
        self.interval_s = interval_s
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
        while True:
            await asyncio.sleep(self.interval_s)
            await self.tick_now()


class TimerRegistry:
    """The gateway's timers; stopped in reverse order of start."""

    def __init__(self) -> None:
        self._timers: dict[str, Timer] = {}
        self._started = False

    def add(self, name: str, interval_s: float, tick: Tick) -> Timer:
        if name in self._timers:
            raise ValueError(f"timer {name!r} is already registered")
        timer = Timer(name, interval_s, tick)
        self._timers[name] = timer
        if self._started:
            timer.start()
        return timer

    def __getitem__(self, name: str) -> Timer:
        return self._timers[name]

    def __contains__(self, name: object) -> bool:
        return name in self._timers

    def start(self) -> None:
        self._started = True
        for timer in self._timers.values():
            timer.start()

    async def stop(self) -> None:
        self._started = False
        for timer in reversed(list(self._timers.values())):
            await timer.stop()
