"""Sends counted per member over sliding windows, for a platform that silently drops what goes over a per-member
limit (WeCom: 30 a minute, 1000 an hour): `InProcessMemberSends` counts this process's sends (files mode), the
PostgreSQL one (`storage/postgres/sends.py`) every instance's, so instances behind one load balancer share it."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence

from agenthub.storage.ports import MemberSends

Windows = tuple[tuple[float, int], ...]
"""(length in seconds, most sends within it), shortest first."""


def check_windows(windows: Sequence[tuple[float, int]]) -> Windows:
    if not windows or any(w <= 0 or limit < 1 for w, limit in windows):
        raise ValueError("every window needs a positive length and a limit of at least 1")
    return tuple(sorted(windows))


def waits_for(ages: Sequence[float], windows: Windows, count: int) -> list[float]:
    """The seconds from now until each of `count` further sends may go, one after another, given how many
    seconds ago each counted send went (oldest first). A send at time t is allowed when, for every window
    (w, limit), fewer than `limit` sends fall in (t - w, t]."""
    sent = [-age for age in ages]
    at = 0.0
    waits: list[float] = []
    for _ in range(count):
        for w, limit in windows:
            if len(sent) >= limit:
                at = max(at, sent[-limit] + w)
        waits.append(at)
        sent.append(at)
    return waits


MemberSendsOpener = Callable[[str, Windows], MemberSends]
"""(name, windows) → a channel's send counts `name`: what `ChannelContext.open_member_sends` holds."""


class InProcessMemberSends:
    """The counts of this process only, on `clock` (tests drive a fake one); a member is forgotten once their
    last send has left every window."""

    def __init__(self, windows: Sequence[tuple[float, int]], *, clock: Callable[[], float] = time.monotonic) -> None:
        self.windows = check_windows(windows)
        self.clock = clock
        self._span = self.windows[-1][0]  # the longest (sorted)
        self._sent: dict[str, deque[float]] = {}
        self._last_sweep = clock()

    async def waits(self, member: str, count: int) -> list[float]:
        now = self.clock()
        return waits_for([now - t for t in self._history(member, now)], self.windows, count)

    async def take(self, member: str) -> float:
        now = self.clock()
        wait = waits_for([now - t for t in self._history(member, now)], self.windows, 1)[0]
        if wait > 0:
            return wait
        self._sent.setdefault(member, deque()).append(now)
        self._sweep(now)
        return 0.0

    def _history(self, member: str, now: float) -> deque[float]:
        history = self._sent.get(member, deque())
        while history and history[0] <= now - self._span:
            history.popleft()
        return history

    def _sweep(self, now: float) -> None:
        """Forget members whose last send left every window (at most once per longest window)."""
        if now - self._last_sweep < self._span:
            return
        self._last_sweep = now
        for member in [m for m, h in self._sent.items() if not h or h[-1] <= now - self._span]:
            del self._sent[member]
