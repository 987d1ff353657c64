"""`removed_messages`: what a replaced history drops, the messages the archive is given first."""

from __future__ import annotations

import json
from collections import Counter

from agenthub.storage.store import HistoryRecord as Message


def removed_messages(old: list[Message], new: list[Message]) -> list[Message]:
    """The messages of `old` that `new` no longer holds, in their original order (a multiset difference)."""
    remaining = Counter(_fingerprint(m) for m in new)
    removed = []
    for message in old:
        fp = _fingerprint(message)
        if remaining[fp] > 0:
            remaining[fp] -= 1
        else:
            removed.append(message)
    return removed


def _fingerprint(message: Message) -> str:
    return json.dumps(message, sort_keys=True, ensure_ascii=False)
