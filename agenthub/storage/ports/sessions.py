"""The sessions' port: durable histories, their archives and meta (`SessionStore`), and a quick existence check."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from agenthub.session_keys import SessionKey
    from agenthub.storage.lease import Lease
    from agenthub.storage.meta import SessionMeta
    from agenthub.storage.store import HistoryRecord, SessionActivity


class SessionStore(Protocol):
    """Durable session histories, their archives and meta. One call is one durable step: when it returns, what it
    wrote survives a crash (meta written with `durable=False` excepted); when it raises `StorageError`, nothing of it
    was written. A malformed record is refused with `MalformedRecordError` before anything is written. Callers
    serialise calls per key (`SessionHistory` does); a backend may still be called for different keys at the same
    time."""

    async def load(self, key: SessionKey) -> list[HistoryRecord]:
        """The working history, oldest first; [] for an unknown session. A torn or corrupt record is skipped."""
        ...

    async def append(self, key: SessionKey, records: Sequence[HistoryRecord]) -> None:
        """Add `records` at the end, all or nothing."""
        ...

    async def replace(
        self, key: SessionKey, records: Sequence[HistoryRecord], *, archive: Sequence[HistoryRecord]
    ) -> None:
        """Append `archive` to the session's archive, then make `records` the working history."""
        ...

    async def clear(self, key: SessionKey, *, archive: Sequence[HistoryRecord]) -> None:
        """Append `archive` to the archive, then remove the working history (the meta stays, design §3)."""
        ...

    async def read_archive(self, key: SessionKey) -> list[HistoryRecord]: ...

    async def rewrite_archive(self, key: SessionKey, records: Sequence[HistoryRecord]) -> None:
        """Replace the whole archive (a redaction), atomically."""
        ...

    async def delete(self, key: SessionKey) -> bool:
        """Remove history, archive and, last, meta (a delete cut short can be repeated). True if anything existed."""
        ...

    async def read_meta(self, key: SessionKey) -> SessionMeta | None:
        """The stored meta; its `updated_at` is never older than the newest record's `timestamp` (a meta written
        behind and lost in a crash is caught up from the history)."""
        ...

    async def write_meta(self, key: SessionKey, meta: SessionMeta, *, durable: bool) -> None:
        """Store `meta`; `durable=False` allows a backend to lose it in a crash (it is rebuilt from the history)."""
        ...

    async def exists(self, key: SessionKey) -> bool:
        """Whether the session has a history or a meta."""
        ...

    async def list_keys(self, agent: str) -> list[SessionKey]:
        """Every session of `agent` that has a history or a meta."""
        ...

    async def keys_with_anything(self, agent: str) -> list[SessionKey]:
        """Every session of `agent` with a history, a meta or an archive (an archive a delete cut short left behind
        included): what "forget me" goes through."""
        ...

    async def activity(self, agent: str) -> list[SessionActivity]:
        """When each of `agent`'s histories last changed, newest first."""
        ...

    async def fence(self, key: SessionKey, token: int | None) -> bool:
        """Write `key` under the fencing token `token` of its session lease from now on (None: under no token, the
        lease was released). A store shared by several instances raises the session's fence to `token` and then
        refuses (`FencedWriteError`, nothing written) every write of this store carrying a token older than the
        fence; `FencedWriteError` here too when `token` is older already. True when the history may have been
        changed by someone else since this store last fenced it (its cached copy must be reloaded). A store only
        one instance writes (files, memory) ignores tokens and returns False."""
        ...


@runtime_checkable
class QuickLookup(Protocol):
    """A backend that can tell without awaiting whether a session exists (the files: one stat). The HTTP routes
    look sessions up synchronously through `SessionHistory.exists`."""

    def exists_now(self, key: SessionKey) -> bool: ...


@runtime_checkable
class AppendsSettling(Protocol):
    """A session store that settles inbox entries in the statement of the append that stores their answer
    (PostgreSQL, over its shared inbox)."""

    async def append_settling(
        self,
        key: SessionKey,
        records: Sequence[HistoryRecord],
        settles: Sequence[str],
        *,
        meta: SessionMeta | None = None,
        lease: Lease | None = None,
    ) -> bool:
        """`append` that also settles the entries `settles` (those still this instance's) once the records landed;
        with `meta` and `lease`, as `AppendsLettingGo.append_letting_go` too. Whether the lease was released."""
        ...
