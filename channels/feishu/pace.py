"""An async token-bucket gate: `rate_per_s` passes per second after a burst of `burst`; waiters by priority."""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger(__name__)

FIRST, URGENT, NORMAL = 0, 1, 2
LANES = 3


class RateGate:
    """Lets callers through while its bucket (`burst` tokens, refilled at `rate_per_s` by `clock`) has a token.

    Any window of `w` seconds therefore sees at most `burst + w * rate_per_s` passes; `burst=1` spaces
    every pass `1 / rate_per_s` apart. Waiters queue in FIFO lanes by priority (0 first); whenever a pass
    is due the lowest non-empty lane goes, so work that can be coalesced (a streaming card's intermediate
    snapshot) yields to work that cannot (its final text and close), and a card's very first text goes
    ahead of both. A cancelled waiter gives its place up.
    """

    def __init__(
        self,
        rate_per_s: float,
        *,
        burst: int = 1,
        name: str = "",
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not rate_per_s > 0 or math.isinf(rate_per_s):
            raise ValueError(f"rate_per_s must be a positive finite number, got {rate_per_s!r}")
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst!r}")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._name = name
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._stamp = clock()
        self._lanes: tuple[deque[asyncio.Future[None]], ...] = tuple(deque() for _ in range(LANES))
        self._releaser: asyncio.Task[None] | None = None
        self.passes = 0
        self.most_waiting = 0

    async def wait(self, *, priority: int = NORMAL, unless: asyncio.Event | None = None) -> bool:
        """Return True when this caller may go, in FIFO order within its lane (`priority`: FIRST, URGENT,
        NORMAL); or False, without using a pass, if `unless` is set before that."""
        if unless is not None and unless.is_set():
            return False
        if not self._has_waiters() and self._delay() <= 0:
            self._take()
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._lanes[max(0, min(priority, LANES - 1))].append(future)
        waiting = self.waiting
        if waiting > self.most_waiting:
            self.most_waiting = waiting
            if waiting % 50 == 0:
                log.info("feishu_rate_gate_backlog", gate=self._name, waiting=waiting)
        if self._releaser is None or self._releaser.done():
            self._releaser = asyncio.create_task(self._release(), name=f"rate-gate-{self._name}")
        if unless is None:
            await future
            return True
        giving_up = asyncio.ensure_future(unless.wait())
        try:
            await asyncio.wait((future, giving_up), return_when=asyncio.FIRST_COMPLETED)
        finally:
            giving_up.cancel()
            future.cancel()  # a no-op once passed; otherwise (given up, or we were cancelled) frees the place
        return not future.cancelled()

    @property
    def waiting(self) -> int:
        """Callers queued now."""
        return sum(len(lane) for lane in self._lanes) if self._has_waiters() else 0

    async def close(self) -> None:
        """Stop releasing; waiters still queued are cancelled."""
        if self._releaser is not None:
            self._releaser.cancel()
            await asyncio.gather(self._releaser, return_exceptions=True)
        for lane in self._lanes:
            while lane:
                lane.popleft().cancel()

    async def _release(self) -> None:
        while self._has_waiters():
            delay = self._delay()
            if delay > 0:
                await self._sleep(delay)
                continue  # re-check: someone more urgent may have arrived, or the head was cancelled
            lane = next(lane for lane in self._lanes if lane)
            lane.popleft().set_result(None)
            self._take()

    def _has_waiters(self) -> bool:
        for lane in self._lanes:
            while lane and lane[0].done():  # cancelled while waiting
                lane.popleft()
        return any(self._lanes)

    def _delay(self) -> float:
        """Seconds until a token is there (refilling the bucket up to now)."""
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.rate_per_s)
        self._stamp = now
        missing = 1.0 - self._tokens
        return 0.0 if missing <= 1e-9 else missing / self.rate_per_s

    def _take(self) -> None:
        self._tokens -= 1.0
        self.passes += 1
