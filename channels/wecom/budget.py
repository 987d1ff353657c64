"""Per-member send budget of one WeCom app: sliding windows, because WeCom silently drops the excess."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager

from channels.toolkit.order import KeyedLock

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class MemberBudget:
    """Counts `message/send` calls per member in sliding windows, e.g. `[(60, 30), (3600, 1000)]`.

    A send is allowed at time t when, for every window (w, limit), fewer than `limit` sends fall in (t - w, t].
    Callers hold `exclusive(member)` while they plan and send, so nobody else spends that member's budget
    between the plan and the sends, and the parts of one answer are not interleaved with another's.
    """

    def __init__(
        self, windows: Sequence[tuple[float, int]], *, clock: Clock = time.monotonic, sleep: Sleep = asyncio.sleep
    ) -> None:
        if not windows or any(w <= 0 or limit < 1 for w, limit in windows):
            raise ValueError("every window needs a positive length and a limit of at least 1")
        self.windows = tuple(sorted(windows))
        self.clock = clock
        self.sleep = sleep
        self._span = max(w for w, _ in self.windows)
        self._sent: dict[str, deque[float]] = {}
        self._members = KeyedLock()
        self._last_sweep = clock()

    @asynccontextmanager
    async def exclusive(self, member: str) -> AsyncIterator[None]:
        """Hold this member's budget: one planner and sender at a time, in arrival order."""
        async with self._members.hold(member):
            yield

    def free(self, member: str) -> int:
        """How many messages may go to `member` right now."""
        history = self._history(member)
        now = self.clock()
        return min(limit - sum(1 for t in history if t > now - w) for w, limit in self.windows)

    def slot_times(self, member: str, count: int) -> list[float]:
        """The earliest times at which `count` further messages may go out, one after another."""
        sent = list(self._history(member))
        at = self.clock()
        times: list[float] = []
        for _ in range(count):
            for w, limit in self.windows:
                if len(sent) >= limit:
                    at = max(at, sent[-limit] + w)
            times.append(at)
            sent.append(at)
        return times

    async def acquire(self, member: str) -> float:
        """Wait until one message may go to `member`, then count it as sent; return the seconds waited."""
        waited = 0.0
        while (wait := self.slot_times(member, 1)[0] - self.clock()) > 0:
            await self.sleep(wait)
            waited += wait
        self._sent.setdefault(member, deque()).append(self.clock())
        self._sweep()
        return waited

    def _history(self, member: str) -> deque[float]:
        history = self._sent.get(member, deque())
        horizon = self.clock() - self._span
        while history and history[0] <= horizon:
            history.popleft()
        return history

    def _sweep(self) -> None:
        """Forget members whose last send left every window (at most once per longest window)."""
        now = self.clock()
        if now - self._last_sweep < self._span:
            return
        self._last_sweep = now
        for member in [m for m, h in self._sent.items() if not h or h[-1] <= now - self._span]:
            del self._sent[member]
