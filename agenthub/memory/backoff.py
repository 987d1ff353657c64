"""Per-session backoff after a failed L2 summary, and which messages a failed attempt already flushed to memory."""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import structlog

from agenthub.jsonsafe import utf8_replacing
from agenthub.session_keys import SessionKey

log = structlog.get_logger(__name__)

Message = dict[str, Any]
RETRY_GROWTH = 10
"""A deferred session is retried early once its history has grown by this many messages since the failure."""
REMEMBERED_SESSIONS = 4096
"""At most this many sessions' failures and flushed heads are remembered (oldest forgotten first)."""


@dataclass
class _Failure:
    at: float
    length: int
    logged: bool = False


class SummaryBackoff:
    """After a failed summary, skip that session's automatic compaction (after-turn threshold, AutoCompact)
    for `retry_after_s` or until `RETRY_GROWTH` more messages, whichever comes first. Manual `/compact` and the
    overflow path are never deferred. It also remembers the head a failed attempt flushed, so a retry flushes
    only what is new."""

    def __init__(self) -> None:
        self._failures: OrderedDict[SessionKey, _Failure] = OrderedDict()
        self._flushed: OrderedDict[SessionKey, tuple[int, str]] = OrderedDict()
        """Per session: how many leading messages a failed attempt flushed, and a digest of them."""

    def deferred(self, key: SessionKey, length: int, *, now: float, retry_after_s: float) -> bool:
        """True while the session is in its skip window; logs `consolidation_deferred` once per window."""
        failure = self._failures.get(key)
        if failure is None or retry_after_s <= 0:
            return False
        if length < failure.length:  # cleared (/restart) or cut since: a different conversation now
            self.settled(key)
            return False
        if now - failure.at >= retry_after_s or length - failure.length >= RETRY_GROWTH:
            return False
        if not failure.logged:
            failure.logged = True
            log.info(
                "consolidation_deferred",
                session_key=str(key),
                retry_in_s=round(retry_after_s - (now - failure.at), 1),
                retry_after_messages=failure.length + RETRY_GROWTH - length,
            )
        return True

    def failed(self, key: SessionKey, length: int, *, now: float) -> None:
        """A summary of this session (`length` messages then) failed: a new skip window starts."""
        _remember(self._failures, key, _Failure(now, length))

    def settled(self, key: SessionKey) -> None:
        """The session was compacted (or its history changed under us): forget its failure and flushed head."""
        self._failures.pop(key, None)
        self._flushed.pop(key, None)

    def unflushed(self, key: SessionKey, head: list[Message]) -> list[Message]:
        """The part of `head` no earlier (failed) attempt has flushed: all of it unless it starts with that
        attempt's head."""
        done = self._flushed.get(key)
        if done is None:
            return head
        count, digest = done
        if len(head) < count or _digest(head[:count]) != digest:
            return head
        return head[count:]

    def flushed(self, key: SessionKey, head: list[Message]) -> None:
        _remember(self._flushed, key, (len(head), _digest(head)))


def _digest(messages: list[Message]) -> str:
    return hashlib.sha256(utf8_replacing(json.dumps(messages, ensure_ascii=False, sort_keys=True))).hexdigest()


def _remember(store: OrderedDict[SessionKey, Any], key: SessionKey, value: Any) -> None:
    store[key] = value
    store.move_to_end(key)
    while len(store) > REMEMBERED_SESSIONS:
        store.popitem(last=False)
