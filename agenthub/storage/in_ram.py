"""`InMemorySessionStore`: a `SessionStore` in a process's memory, for tests; the same semantics as the files."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agenthub.errors import StorageError
from agenthub.session_keys import SessionKey
from agenthub.storage.meta import SessionMeta
from agenthub.storage.store import HistoryRecord, SessionActivity, check_records, newest_timestamp


@dataclass
class _Stored:
    history: list[HistoryRecord] | None = None  # None: no history (never written, or cleared)
    archive: list[HistoryRecord] = field(default_factory=list)
    meta: SessionMeta | None = None
    changed_at: float = 0.0


class InMemorySessionStore:
    """Every record is deep-copied in and out, so a caller can never change what is stored. `fail_writes` makes
    every write raise StorageError before it changes anything (a full disk, for the contract suite)."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._sessions: dict[SessionKey, _Stored] = {}
        self.fail_writes = False

    def _writable(self, key: SessionKey) -> _Stored:
        if self.fail_writes:
            raise StorageError("could not store: writes are failing")
        return self._sessions.setdefault(key, _Stored())

    def _touched(self, stored: _Stored) -> None:
        stored.changed_at = self._clock()

    async def load(self, key: SessionKey) -> list[HistoryRecord]:
        stored = self._sessions.get(key)
        return copy.deepcopy(stored.history or []) if stored else []

    async def append(self, key: SessionKey, records: Sequence[HistoryRecord]) -> None:
        check_records(records)
        if not records:
            return
        stored = self._writable(key)
        stored.history = [*(stored.history or []), *copy.deepcopy(list(records))]
        self._touched(stored)

    async def replace(
        self, key: SessionKey, records: Sequence[HistoryRecord], *, archive: Sequence[HistoryRecord]
    ) -> None:
        check_records(records)
        stored = self._writable(key)
        stored.archive.extend(copy.deepcopy(list(archive)))
        stored.history = copy.deepcopy(list(records))
        self._touched(stored)

    async def clear(self, key: SessionKey, *, archive: Sequence[HistoryRecord]) -> None:
        stored = self._writable(key)
        stored.archive.extend(copy.deepcopy(list(archive)))
        stored.history = None

    async def read_archive(self, key: SessionKey) -> list[HistoryRecord]:
        stored = self._sessions.get(key)
        return copy.deepcopy(stored.archive) if stored else []

    async def rewrite_archive(self, key: SessionKey, records: Sequence[HistoryRecord]) -> None:
        self._writable(key).archive = copy.deepcopy(list(records))

    async def delete(self, key: SessionKey) -> bool:
        if self.fail_writes:
            raise StorageError("could not store: writes are failing")
        stored = self._sessions.pop(key, None)
        return stored is not None and (stored.history is not None or bool(stored.archive) or stored.meta is not None)

    async def read_meta(self, key: SessionKey) -> SessionMeta | None:
        stored = self._sessions.get(key)
        if stored is None or stored.meta is None:
            return None
        newest = newest_timestamp(stored.history or [])
        meta = stored.meta
        return meta.with_changes(updated_at=newest) if newest is not None and newest > meta.updated_at else meta

    async def write_meta(self, key: SessionKey, meta: SessionMeta, *, durable: bool) -> None:
        self._writable(key).meta = meta

    async def exists(self, key: SessionKey) -> bool:
        return self.exists_now(key)

    def exists_now(self, key: SessionKey) -> bool:
        stored = self._sessions.get(key)
        return stored is not None and (stored.history is not None or stored.meta is not None)

    async def list_keys(self, agent: str) -> list[SessionKey]:
        return sorted(
            (k for k, s in self._sessions.items() if k.agent == agent and (s.history is not None or s.meta)),
            key=lambda k: k.file_stem,
        )

    async def keys_with_anything(self, agent: str) -> list[SessionKey]:
        return sorted(
            (
                k
                for k, s in self._sessions.items()
                if k.agent == agent and (s.history is not None or s.meta or s.archive)
            ),
            key=lambda k: k.file_stem,
        )

    async def activity(self, agent: str) -> list[SessionActivity]:
        found = [SessionActivity(k, s.changed_at) for k, s in self._sessions.items() if k.agent == agent]
        return sorted(
            (a for a in found if self._sessions[a.key].history is not None), key=lambda a: a.changed_at, reverse=True
        )

    async def fence(self, key: SessionKey, token: int | None) -> bool:
        """One process's memory has one writer: nothing to fence, never changed by someone else."""
        return False
