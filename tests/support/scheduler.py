"""Support for scheduler tests: a manual clock on a fixed Shanghai morning and a channel that records pushes."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from zoneinfo import ZoneInfo

from agenthub.messages import OutboundMessage

SHANGHAI = ZoneInfo("Asia/Shanghai")


def shanghai(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
    """Epoch seconds of a Shanghai wall-clock time."""
    return dt.datetime(year, month, day, hour, minute, second, tzinfo=SHANGHAI).timestamp()


START = shanghai(2026, 12, 1, 8, 0)
"""Tuesday 2026-12-01 08:00 in Shanghai: where the tests' clocks start."""


class RecordingChannel:
    """A channel at the scheduler's delivery boundary: it records every proactive message."""

    def __init__(self, name: str = "cli") -> None:
        self.name = name
        self.sent: list[OutboundMessage] = []
        self._changed = asyncio.Condition()

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def send(self, message: OutboundMessage) -> None:
        self.sent.append(message)
        async with self._changed:
            self._changed.notify_all()

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[OutboundMessage]:
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: len(self.sent) >= count)
        return self.sent

    def texts(self) -> list[str]:
        return [m.content for m in self.sent]


async def until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait until `predicate()` holds (state the code exposes no event for); `TimeoutError` after `timeout`."""
    async with asyncio.timeout(timeout):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.005)
