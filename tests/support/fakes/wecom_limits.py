"""Time and WeCom's per-member send cap for the fake WeCom: a test-driven clock and the silent-drop counter."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


class FakeClock:
    """A clock that moves only when the test says so; `sleep` returns once the clock has passed its deadline."""

    def __init__(self, start: float = 10_000.0) -> None:
        self.t = start
        self.sleeping = 0
        self.slept: list[float] = []
        self._cond = asyncio.Condition()

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        deadline = self.t + seconds
        self.slept.append(seconds)
        async with self._cond:
            self.sleeping += 1
            self._cond.notify_all()
            try:
                await self._cond.wait_for(lambda: self.t >= deadline)
            finally:
                self.sleeping -= 1

    async def advance(self, seconds: float) -> None:
        async with self._cond:
            self.t += seconds
            self._cond.notify_all()

    async def wait_sleeping(self, count: int = 1, timeout: float = 5.0) -> None:
        """Wait until `count` tasks sleep on this clock."""
        async with asyncio.timeout(timeout), self._cond:
            await self._cond.wait_for(lambda: self.sleeping >= count)


class MemberLimit:
    """WeCom's cap on one app's messages to one member: at most `member_per_minute` / `member_per_hour`
    (sliding windows on `clock`); the rest is answered errcode 0 and silently dropped."""

    def __init__(self) -> None:
        self.member_per_minute = 30
        self.member_per_hour = 1000
        self.clock: Callable[[], float] = time.monotonic
        self._delivered: dict[tuple[int, str], list[float]] = {}

    def _over_member_limit(self, body: dict[str, Any]) -> bool:
        """Count the message for each recipient; True when any of them is over a window's limit."""
        now, over = self.clock(), False
        for user in str(body.get("touser", "")).split("|"):
            times = self._delivered.setdefault((int(body.get("agentid", 0)), user), [])
            minute = sum(1 for t in times if t > now - 60)
            hour = sum(1 for t in times if t > now - 3600)
            if minute >= self.member_per_minute or hour >= self.member_per_hour:
                over = True
            else:
                times.append(now)
        return over
