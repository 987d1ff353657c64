"""The histories an instance last read or wrote on PostgreSQL, each with the version it saw (`born`, `next_seq` of
`session_heads`): a session that comes back to the instance is brought up to date with the records after that
version (one small query) instead of read in full."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from agenthub.session_keys import SessionKey

COPIES_KEPT = 1_000
"""Sessions whose copy is kept (the most recently used); the others are read in full when they come back."""


@dataclass
class Copy:
    born: int
    """The history's generation: a replace or a clear starts a new one, so older records of the copy are stale."""
    next_seq: int
    """The seq the next record of the history gets: the copy holds every record before it."""
    texts: list[str]
    """The records as stored (JSON texts): decoded for each caller, so no caller can change what another reads."""


class SessionCopies:
    """A bounded LRU of `Copy` by session. Every change keeps a copy exactly what the database held at one version:
    an append extends it only when it follows that version directly; anything else drops it."""

    def __init__(self, limit: int = COPIES_KEPT) -> None:
        self._limit = limit
        self._copies: OrderedDict[SessionKey, Copy] = OrderedDict()

    def get(self, key: SessionKey) -> Copy | None:
        copy = self._copies.get(key)
        if copy is not None:
            self._copies.move_to_end(key)
        return copy

    def put(self, key: SessionKey, born: int, next_seq: int, texts: list[str]) -> Copy:
        copy = self._copies[key] = Copy(born, next_seq, texts)
        self._copies.move_to_end(key)
        if len(self._copies) > self._limit:
            self._copies.popitem(last=False)
        return copy

    def appended(self, key: SessionKey, born: int, next_seq: int, texts: list[str]) -> None:
        """`texts` (records) were appended, the history is now at (`born`, `next_seq`)."""
        copy = self._copies.get(key)
        if copy is None:
            return
        if copy.born == born and copy.next_seq + len(texts) == next_seq:
            copy.texts.extend(texts)
            copy.next_seq = next_seq
        else:  # someone else wrote in between: the copy misses records
            del self._copies[key]

    def drop(self, key: SessionKey) -> None:
        self._copies.pop(key, None)
