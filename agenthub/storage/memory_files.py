"""`MemoryStore`: the memory text files (MEMORY.md, USER.md, chat-scoped and per-user profiles, their `.bak`, the L3
state) by a logical `MemoryName`, with the files backend (today's paths, atomic writes) and an in-memory one."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal, Protocol, TypeVar

from agenthub.errors import StorageError
from agenthub.storage.atomic import atomic_write_text
from agenthub.storage.keys import SessionKey, session_key, validate_agent_name
from agenthub.storage.paths import AgentLayout, inside

MemoryKind = Literal["agent_memory", "chat_memory", "shared_profile", "private_profile", "group_profile", "l3_state"]
Visibility = Literal["private", "group"]
L3_STATE_FILE = ".l3_state.json"
T = TypeVar("T")


@dataclass(frozen=True)
class MemoryName:
    """One memory file, named by what it is rather than where it lives. Build it with the classmethods."""

    kind: MemoryKind
    agent: str = ""
    chat: str = ""  # the chat's session file stem (chat memory, group profiles)
    person: str = ""  # the profile's file stem: `<agent>_<channel>_<sender>`
    backup: bool = False  # the one previous generation of a rewritten file (`<file>.bak`)

    @classmethod
    def agent_memory(cls, agent: str) -> MemoryName:
        return cls("agent_memory", agent=validate_agent_name(agent))

    @classmethod
    def chat_memory(cls, key: SessionKey) -> MemoryName:
        return cls("chat_memory", agent=key.agent, chat=key.file_stem)

    @classmethod
    def shared_profile(cls) -> MemoryName:
        return cls("shared_profile")

    @classmethod
    def person_profile(cls, agent: str, key: SessionKey, sender_id: str, visibility: Visibility) -> MemoryName:
        """`sender_id`'s profile with `agent` on `key`'s channel: their private one, or the one of the group chat
        `key`."""
        person = session_key(agent, key.channel, sender_id).file_stem
        if visibility == "group":
            return cls("group_profile", agent=agent, chat=key.file_stem, person=person)
        return cls("private_profile", agent=agent, person=person)

    @classmethod
    def l3_state(cls, agent: str) -> MemoryName:
        return cls("l3_state", agent=validate_agent_name(agent))

    def backup_name(self) -> MemoryName:
        return replace(self, backup=True)


class MemoryStore(Protocol):
    """The memory text files. A write replaces the whole file atomically and durably (a reader sees the old or the
    new text, never a mix); StorageError when it cannot. Read-modify-writes are serialised by `MemoryWriter`."""

    async def read(self, name: MemoryName) -> str:
        """The text, "" when the file does not exist."""
        ...

    async def write(self, name: MemoryName, text: str) -> None: ...

    async def delete(self, name: MemoryName) -> bool:
        """True if it existed."""
        ...


class FileMemoryStore:
    """Memory files at design §4's paths: `data/<agent>/memory/MEMORY.md`, `…/memory/chats/<chat>.md`,
    `auth/USER.md`, `auth/users/<person>.md`, `auth/users/group/<chat>/<person>.md`, `…/memory/.l3_state.json`."""

    def __init__(self, data_dir: Path, auth_dir: Path, *, durable: bool = True) -> None:
        self.data_dir, self.auth_dir, self.durable = data_dir, auth_dir, durable
        self._layouts: dict[str, AgentLayout] = {}

    def _layout(self, agent: str) -> AgentLayout:
        """The agent's layout, made once (its directories are still checked for links at every path read)."""
        layout = self._layouts.get(agent)
        if layout is None:
            layout = self._layouts[agent] = AgentLayout(self.data_dir, agent)
        return layout

    def path_of(self, name: MemoryName) -> Path:
        """Where `name` lives; each level below the data and auth directories is refused if it is a link."""
        path = self._path(name)
        return path.with_name(path.name + ".bak") if name.backup else path

    def _path(self, name: MemoryName) -> Path:
        if name.kind == "shared_profile":
            return self.auth_dir / "USER.md"
        if name.kind == "private_profile":
            return inside(self.auth_dir / "users", name.person + ".md")
        if name.kind == "group_profile":
            return inside(inside(self.auth_dir / "users" / "group", name.chat), name.person + ".md")
        layout = self._layout(name.agent)
        if name.kind == "chat_memory":
            return inside(layout.memory_dir / "chats", name.chat + ".md")
        if name.kind == "l3_state":
            return layout.memory_dir / L3_STATE_FILE
        return layout.memory_file

    async def read(self, name: MemoryName) -> str:
        path = self.path_of(name)
        return await _on_disk("read a memory file", lambda: _read(path))

    async def write(self, name: MemoryName, text: str) -> None:
        path = self.path_of(name)
        await _on_disk("write a memory file", lambda: atomic_write_text(path, text, durable=self.durable))

    async def delete(self, name: MemoryName) -> bool:
        path = self.path_of(name)
        return await _on_disk("delete a memory file", lambda: _unlink(path))


class InMemoryMemoryStore:
    """Memory files in a dict, for tests. `fail_writes` makes every write raise StorageError, changing nothing."""

    def __init__(self) -> None:
        self._texts: dict[MemoryName, str] = {}
        self.fail_writes = False

    async def read(self, name: MemoryName) -> str:
        text = self._texts.get(name, "")
        await asyncio.sleep(0)  # a real backend yields between reading and answering: unserialised writers race
        return text

    async def write(self, name: MemoryName, text: str) -> None:
        if self.fail_writes:
            raise StorageError("could not write a memory file: writes are failing")
        self._texts[name] = text

    async def delete(self, name: MemoryName) -> bool:
        return self._texts.pop(name, None) is not None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def _unlink(path: Path) -> bool:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        return True
    return False


async def _on_disk(what: str, operation: Callable[[], T]) -> T:
    """A blocking file operation in a worker thread; an OSError there (a full or read-only disk) is StorageError."""
    try:
        return await asyncio.to_thread(operation)
    except OSError as e:
        raise StorageError(f"could not {what}") from e
