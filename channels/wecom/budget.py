"""Per-member send budget of one WeCom app: sliding windows, because WeCom silently drops the excess. The counts are
this process's (files mode) or, on PostgreSQL, every instance's (`ChannelContext.open_member_sends`)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager

from agenthub.storage.member_sends import InProcessMemberSends, MemberSendsOpener, check_windows
from agenthub.storage.ports import MemberSends
from channels.toolkit.order import KeyedLock

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class MemberBudget:
    """Counts `message/send` calls per member in sliding windows, e.g. `[(60, 30), (3600, 1000)]`.

    A send is allowed at time t when, for every window (w, limit), fewer than `limit` sends fall in (t - w, t].
    Callers hold `exclusive(member)` while they plan and send, so nobody else in this process spends that
    member's budget between the plan and the sends, and the parts of one answer are not interleaved with
    another's. Each send is counted (`acquire`) atomically where the counts live: another instance sharing them
    may make a planned part wait longer, never go over the limit.
    """

    def __init__(
        self,
        windows: Sequence[tuple[float, int]],
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        sends: MemberSends | None = None,
    ) -> None:
        self.windows = check_windows(windows)
        self.sends = sends or InProcessMemberSends(self.windows, clock=clock)
        self.sleep = sleep
        self._members = KeyedLock()

    @classmethod
    def opened(
        cls,
        name: str,
        windows: Sequence[tuple[float, int]],
        opener: MemberSendsOpener | None,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> MemberBudget:
        """The budget whose counts `opener` keeps under `name` (None: this process's own, on `clock`)."""
        sends = None if opener is None else opener(name, check_windows(windows))
        return cls(windows, clock=clock, sleep=sleep, sends=sends)

    @asynccontextmanager
    async def exclusive(self, member: str) -> AsyncIterator[None]:
        """Hold this member's budget: one planner and sender at a time, in arrival order."""
        async with self._members.hold(member):
            yield

    async def waits(self, member: str, count: int) -> list[float]:
        """The seconds from now until each of `count` further messages may go to `member`, one after another."""
        return await self.sends.waits(member, count)

    async def acquire(self, member: str, within_s: float = math.inf) -> float:
        """Wait until one message may go to `member`, then count it as sent; return the seconds waited.
        `OverBudget` (nothing counted) when that would take more than `within_s` seconds in all: another
        instance sharing the counts spent what the plan had seen free."""
        waited = 0.0
        while (wait := await self.sends.take(member)) > 0:
            if waited + wait > within_s:
                raise OverBudget(wait)
            await self.sleep(wait)
            waited += wait
        return waited


class OverBudget(Exception):
    """The next message may go only in `wait_s` seconds, later than the caller may wait."""

    def __init__(self, wait_s: float) -> None:
        super().__init__(f"the next message may go in {wait_s:.0f} s")
        self.wait_s = wait_s
