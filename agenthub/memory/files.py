"""Where MEMORY.md and USER.md live for a session (honouring the per-agent privacy options), and the one
serialised writer every change to them goes through."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agenthub.agent.definition import AgentDefinition
from agenthub.session.keys import SessionKey, session_key
from agenthub.storage.atomic import atomic_write_text
from agenthub.storage.paths import AgentLayout, inside


class MemoryWriter:
    """One asyncio lock per memory file (keyed by its resolved path): every read-modify-write of a memory file
    (the write_memory tool, L3, the memory flush before a compaction) runs under its file's lock, so two writers
    never both read the old text and one of them silently drops the other's change. Readers need no lock: each
    write is an atomic replace."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[Path, asyncio.Lock] = weakref.WeakValueDictionary()

    def lock(self, path: Path) -> asyncio.Lock:
        """The lock of `path`'s file; hold it only around read-merge-write, never across a model call."""
        key = path.resolve()
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock

    async def update(self, path: Path, change: Callable[[str], str]) -> str:
        """Under the file's lock: read it ("" when missing), write `change(text)` atomically; returns the new text.
        An exception from `change` leaves the file as it was."""
        async with self.lock(path):
            new = change(await read_text(path))
            await write_text(path, new)
            return new


@dataclass(frozen=True)
class MemoryFiles:
    """Resolves memory file paths; `scope="chat"` and `user_profile="per_user"` keep people's facts apart.
    `writer` serialises the changes to each file."""

    data_dir: Path
    auth_dir: Path
    writer: MemoryWriter = field(default_factory=MemoryWriter, compare=False, repr=False)

    def memory_path(self, agent: AgentDefinition, key: SessionKey | None = None) -> Path:
        layout = AgentLayout(self.data_dir, agent.name)
        if agent.config.memory.scope == "chat" and key is not None:
            return inside(layout.memory_dir / "chats", key.file_stem + ".md")
        return layout.memory_file

    def user_path(self, agent: AgentDefinition, sender_id: str | None = None) -> Path:
        if agent.config.memory.user_profile == "per_user" and sender_id:
            stem = session_key(agent.name, "user", sender_id).file_stem
            return inside(self.auth_dir / "users", stem + ".md")
        return self.auth_dir / "USER.md"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


async def read_text(path: Path) -> str:
    """The file's text, or "" when it does not exist."""
    return await asyncio.to_thread(_read, path)


def backup_path(path: Path) -> Path:
    """Where the previous version of a rewritten memory file is kept (one generation): `<file>.bak`."""
    return path.with_name(path.name + ".bak")


async def write_text(path: Path, text: str) -> None:
    """Atomic, durable replace."""
    await asyncio.to_thread(atomic_write_text, path, text)
