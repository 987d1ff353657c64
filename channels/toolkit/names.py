"""`NameDirectory`: a platform sender id → the person's display name, through the platform's contact API; cached
(bounded, a day), one lookup per person at a time, and a turn waits for it at most a short timeout (else the id)."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import structlog

log = structlog.get_logger(__name__)

NAME_TTL_S = 86400.0
"""How long a name (or that a person has none the app may read) is remembered."""
RETRY_S = 600.0
"""After a failed lookup (or a credential refused the contact API), the id is used this long before asking again."""
MAX_NAMES = 10_000
MAX_NAME_CHARS = 64

Unknown = Literal["app", "person", "call"]


class NameUnknown(Exception):
    """A lookup that gave no name. `kind` "app": the credential may not read contacts at all (no lookups for a
    while); "person": this person cannot be named (not found, outside the app's contact range; remembered like a
    name); "call": the call failed (network, rate limit; retried later). `hint` tells the operator what to do."""

    def __init__(self, kind: Unknown, reason: str, hint: str = "") -> None:
        super().__init__(reason)
        self.kind: Unknown = kind
        self.reason = reason
        self.hint = hint


Lookup = Callable[[str], Awaitable[str | None]]
"""A platform's lookup: the display name, None when the person has none; raises `NameUnknown`."""


@dataclass(slots=True)
class _Known:
    name: str | None
    until: float


class NameDirectory:
    """One credential's names. `name()` answers from the cache, else starts the lookup (one per person at a time,
    however many of their messages ask) and waits for it at most `wait_s`; a lookup still running then fills the
    cache for the person's next message. Failures are logged once (per kind, until a lookup succeeds again)."""

    def __init__(
        self,
        lookup: Lookup,
        *,
        channel: str,
        cred_id: str,
        wait_s: float = 0.5,
        ttl_s: float = NAME_TTL_S,
        retry_s: float = RETRY_S,
        max_names: int = MAX_NAMES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lookup = lookup
        self.channel = channel
        self.cred_id = cred_id
        self.wait_s = wait_s
        self.ttl_s = ttl_s
        self.retry_s = retry_s
        self.max_names = max_names
        self._clock = clock
        self._known: OrderedDict[str, _Known] = OrderedDict()
        self._running: dict[str, asyncio.Task[str | None]] = {}
        self._paused_until = 0.0  # the credential was refused the contact API: no lookups until then
        self._logged: set[str] = set()
        self._closed = False
        self.lookups = 0
        """Lookups started (tests; a cache hit starts none)."""

    def cached(self, sender_id: str) -> tuple[bool, str | None]:
        """(known, name): whether the cache answers for `sender_id` now, and its name (None: use the id)."""
        known = self._known.get(sender_id)
        if known is None:
            return False, None
        if self._clock() >= known.until:
            del self._known[sender_id]
            return False, None
        self._known.move_to_end(sender_id)
        return True, known.name

    def prefetch(self, sender_id: str) -> None:
        """Start looking `sender_id` up (unless cached or under way), without waiting: `name()` later is quicker."""
        if sender_id and not self.cached(sender_id)[0]:
            self._start(sender_id)

    async def name(self, sender_id: str) -> str | None:
        """The display name of `sender_id`, or None (use the id): unknown, failed, or slower than `wait_s`."""
        if not sender_id:
            return None
        known, name = self.cached(sender_id)
        if known:
            return name
        task = self._start(sender_id)
        if task is None:
            return None
        try:
            return await asyncio.wait_for(asyncio.shield(task), self.wait_s)
        except TimeoutError:  # the lookup goes on and fills the cache for the next message
            self._log_once("slow", "sender_name_slow", wait_s=self.wait_s)
            return None
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and (current is None or not current.cancelling()):
                return None  # the directory closed under us, not this caller
            raise

    def _start(self, sender_id: str) -> asyncio.Task[str | None] | None:
        running = self._running.get(sender_id)
        if running is not None:
            return running
        if self._closed or self._clock() < self._paused_until:
            return None
        self.lookups += 1
        task = asyncio.get_running_loop().create_task(self._look_up(sender_id), name=f"name-{self.channel}")
        self._running[sender_id] = task
        return task

    async def _look_up(self, sender_id: str) -> str | None:
        try:
            found = await self._lookup(sender_id)
        except NameUnknown as e:
            self._failed(sender_id, e)
            return None
        except Exception as e:  # a bug or an SDK surprise: the id is used, the turn goes on
            self._failed(sender_id, NameUnknown("call", type(e).__name__))
            return None
        finally:
            self._running.pop(sender_id, None)
        name = _clean(found)
        self._remember(sender_id, name, self.ttl_s)
        self._logged.discard("call")
        self._logged.discard("slow")
        return name

    def _failed(self, sender_id: str, e: NameUnknown) -> None:
        if e.kind == "app":
            self._paused_until = self._clock() + self.retry_s
            self._log_once("app", "sender_names_not_permitted", reason=e.reason, hint=e.hint)
        elif e.kind == "person":
            self._remember(sender_id, None, self.ttl_s)
            self._log_once(f"person:{e.reason}", "sender_name_unknown", sender=sender_id, reason=e.reason, hint=e.hint)
        else:
            self._remember(sender_id, None, self.retry_s)
            self._log_once("call", "sender_name_lookup_failed", reason=e.reason, hint=e.hint, retry_in_s=self.retry_s)

    def _remember(self, sender_id: str, name: str | None, ttl_s: float) -> None:
        self._known[sender_id] = _Known(name, self._clock() + ttl_s)
        self._known.move_to_end(sender_id)
        while len(self._known) > self.max_names:
            self._known.popitem(last=False)

    def _log_once(self, key: str, event: str, **fields: object) -> None:
        if key in self._logged:
            return
        self._logged.add(key)
        log.warning(event, channel=self.channel, cred_id=self.cred_id, **{k: v for k, v in fields.items() if v})

    async def close(self) -> None:
        """Stop the lookups under way (the channel stops); `name()` answers None from now on."""
        self._closed = True
        running = list(self._running.values())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)


def _clean(name: str | None) -> str | None:
    """A platform's name as it may stand in a chat text: one line, at most `MAX_NAME_CHARS`; None when blank."""
    if not isinstance(name, str):
        return None
    flat = " ".join(name.split())
    return flat[:MAX_NAME_CHARS] or None
