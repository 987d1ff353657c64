"""A credential's dedup check of platform message ids, over the core's durable `DedupStore` memory."""

from __future__ import annotations

import structlog

from agenthub.channel import ChannelContext
from agenthub.errors import StorageError
from agenthub.storage.dedup import DedupStore
from agenthub.storage.ports import SeenIds

log = structlog.get_logger(__name__)

__all__ = ["MessageDedup", "SeenIds", "open_seen_ids"]


def open_seen_ids(context: ChannelContext, name: str, *, ttl_s: float) -> SeenIds:
    """The channel's dedup memory `name`, remembering ids for `ttl_s`: the one place a channel's dedup state is
    opened. The context's store decides where it lives (the file `<state_dir>/<name>` in the files mode, a scope of
    the shared `seen_ids` table on PostgreSQL); a context built without one uses the file."""
    if context.open_seen_ids is not None:
        return context.open_seen_ids(name, ttl_s)
    return DedupStore(context.state_dir / name, ttl_s=ttl_s)


class MessageDedup:
    """One credential's view of a dedup memory: keys are `<cred_id>:<message key>`, so two bots (or apps) of
    a channel sharing one memory never take each other's ids for duplicates.

    The check runs before the message is stored in the inbox (`toolkit/inbox.py`); a memory that cannot be
    written fails open (the inbox write decides: a possible duplicate beats a certain loss), and an id whose
    inbox write was refused is `forget`-ten, so the platform's retry of it is not dropped as a duplicate."""

    def __init__(self, seen: SeenIds, *, channel: str, cred_id: str) -> None:
        self._seen = seen
        self._channel = channel
        self._cred_id = cred_id
        self._forgotten: set[str] = set()

    def __len__(self) -> int:
        """How many ids the memory holds now (every credential's)."""
        return len(self._seen)

    @property
    def window_s(self) -> float:
        """The replay window of signed callbacks: an id is remembered this long, so no accepted replay is new."""
        return self._seen.ttl_s

    async def is_duplicate(self, key: str) -> bool:
        """True when `key` was handled already (a redelivery), logged; otherwise remember it durably."""
        try:
            duplicate = await self._seen.check_and_add(f"{self._cred_id}:{key}") and key not in self._forgotten
            self._forgotten.discard(key)
        except (OSError, StorageError) as e:  # a file that cannot be written, a database that is away
            log.error(f"{self._channel}_dedup_unavailable", cred_id=self._cred_id, key=key, error=str(e))
            return False
        if duplicate:
            log.info(f"{self._channel}_duplicate_dropped", cred_id=self._cred_id, key=key)
        return duplicate

    async def forget(self, key: str) -> None:
        """`key` was seen but not kept (the inbox refused it): its next delivery, the platform's retry, is new, on
        this instance and on any other one, now and after a restart. If even that write fails, this process still
        lets the retry through (`_forgotten`)."""
        self._forgotten.add(key)
        try:
            await self._seen.forget(f"{self._cred_id}:{key}")
        except (OSError, StorageError) as e:
            log.error(f"{self._channel}_dedup_unavailable", cred_id=self._cred_id, key=key, error=str(e))
