"""Session records as stored: history records, the errors a store raises, activity (port: `ports.SessionStore`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agenthub.errors import StorageError
from agenthub.session_keys import SessionKey

HistoryRecord = dict[str, Any]
"""One stored message: the Anthropic message (`role`, `content`) plus our fields (`timestamp` in ms, `channel`,
`chat_type`, `sender_id`, `message_id`, `together`, `scheduled_job`, `inbox_id`). A plain dict on purpose: it is
handed to the SDK as it is; the store checks `role` and `content` at its boundary (`check_records`)."""

ROLES = frozenset({"user", "assistant", "system"})
"""design §4: `system` is the L2 summary (`[历史摘要] …`), turned into a user-side note before the API call."""


class MalformedRecordError(StorageError, ValueError):
    """A record that is not a history message (no known `role`, `content` neither text nor content blocks)."""


class FencedWriteError(StorageError):
    """A write under a session lease's fencing token older than the session's fence: another instance has taken
    the session over since, so nothing of the write was stored."""

    def __init__(self) -> None:
        super().__init__("the session was taken over by another instance: this write was refused")


def check_records(records: Sequence[HistoryRecord]) -> None:
    """Refuse (MalformedRecordError, nothing stored) any record that is not an object with a known `role` and a
    `content` that is a string or a list of content-block objects."""
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise MalformedRecordError(f"record {index} is not an object")
        if record.get("role") not in ROLES:
            raise MalformedRecordError(f"record {index} has no role of {sorted(ROLES)}")
        content = record.get("content")
        if not (isinstance(content, str) or (isinstance(content, list) and all(isinstance(b, dict) for b in content))):
            raise MalformedRecordError(f"record {index} has content that is neither text nor content blocks")


def newest_timestamp(records: Sequence[HistoryRecord]) -> int | None:
    """The `timestamp` (ms) of the last record that has one."""
    for record in reversed(records):
        stamp = record.get("timestamp")
        if isinstance(stamp, int | float) and not isinstance(stamp, bool):
            return int(stamp)
    return None


@dataclass(frozen=True)
class SessionActivity:
    """When a session's history last changed (epoch seconds): what AutoCompact and L3 pick sessions by."""

    key: SessionKey
    changed_at: float
