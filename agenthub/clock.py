"""An injectable clock, so timers and timeouts can be tested without sleeping."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

MAX_REAL_SLEEP_S = 300.0
"""A real sleep is cut into pieces this long, so a wall-clock jump (NTP, suspend) is noticed within minutes."""


class Clock(Protocol):
    def __call__(self) -> float: ...


class ManualClock:
    """A clock that only moves when told to; for tests. `sleep_until` waiters wake when `advance` passes them."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
        waiting = []
        for deadline, future in self._sleepers:
            if future.done():
                continue
            if deadline <= self.now:
                future.set_result(None)
            else:
                waiting.append((deadline, future))
        self._sleepers = waiting

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= self.now:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((deadline, future))
        await future


async def sleep_until(clock: Clock, deadline: float) -> None:
    """Return once `clock()` has reached `deadline`: a `ManualClock` wakes on `advance`, a real clock sleeps."""
    if isinstance(clock, ManualClock):
        await clock.sleep_until(deadline)
        return
    # a deadline on the wall clock, re-read after each piece: there is no event to wait for
    while (left := deadline - clock()) > 0:  # noqa: ASYNC110
        await asyncio.sleep(min(left, MAX_REAL_SLEEP_S))


system_clock: Clock = time.time
monotonic_clock: Clock = time.monotonic
"""For deadlines that must not move when the wall clock is stepped (NTP, an operator): leases are judged by it."""
