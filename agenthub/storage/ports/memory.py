"""The memory files' port (`MemoryStore`): whole texts replaced atomically, read one or many at a time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from agenthub.storage.memory_files import Change, MemoryName


class MemoryStore(Protocol):
    """The memory text files. A write replaces the whole file atomically and durably (a reader sees the old or the
    new text, never a mix); StorageError when it cannot."""

    async def read(self, name: MemoryName) -> str:
        """The text, "" when the file does not exist."""
        ...

    async def read_many(self, names: Sequence[MemoryName], *, fresh_since: float | None = None) -> list[str]:
        """`read` of each, in one go (one worker-thread hop, one query). `fresh_since` (monotonic clock; None:
        now): the texts may be as of any moment from then on, at least as new as every write that completed
        before it (a store that learns the files' version from statements sent anyway may answer from its copy)."""
        ...

    async def write(self, name: MemoryName, text: str) -> None: ...

    async def update(self, name: MemoryName, change: Change, *, keep_backup: bool = False) -> str:
        """One read-modify-write, atomic against every other writer of the store (on PostgreSQL: of every
        instance): `change(current text)` is written unless it equals the current text; with `keep_backup` a
        non-empty replaced text becomes `name.backup_name()` in the same step. An exception from `change` leaves
        everything as it was. Returns the text stored now."""
        ...

    async def delete(self, name: MemoryName) -> bool:
        """True if it existed."""
        ...

    async def group_profiles(self, person: str) -> list[MemoryName]:
        """The group profiles kept for the person stem `person`: one name (never a backup's) per group chat where
        the profile or its backup exists."""
        ...

    def label(self, name: MemoryName) -> str:
        """How logs, tool results and the L3 state name it (stable, one-to-one; never checks the disk)."""
        ...
