"""Arrival order per key (a chat, a member, a stream): one holder at a time, in the order they asked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


@dataclass
class _Turnstile:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class KeyedLock:
    """`async with lock.hold(key)` lets one holder per key in at a time, in the order they asked (asyncio's
    Lock is FIFO), so a slow step of one message (fetching its quote) delays the later messages of that chat
    only. A key's lock exists only while someone holds or waits for it: memory is bounded by the chats busy
    right now."""

    def __init__(self) -> None:
        self._keys: dict[str, _Turnstile] = {}

    def __len__(self) -> int:
        """How many keys are held or waited for now."""
        return len(self._keys)

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """Wait for the earlier holders of `key` (none: no suspension), hold it for the block, then pass it on."""
        turnstile = self._keys.get(key)
        if turnstile is None:
            turnstile = self._keys[key] = _Turnstile()
        turnstile.users += 1
        try:
            async with turnstile.lock:
                yield
        finally:
            turnstile.users -= 1
            if turnstile.users == 0:
                del self._keys[key]
