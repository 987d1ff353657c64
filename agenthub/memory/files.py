"""Where MEMORY.md and the user profiles live for a chat (the memory scope: `auto`, `agent`, `chat`; the profile:
`auto`, `shared`, `per_user`, kept per person and visibility on multi-user channels), and the one serialised writer
every change to them goes through."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from agenthub.agent.definition import AgentDefinition
from agenthub.aio import run_to_end
from agenthub.storage.atomic import atomic_write_text
from agenthub.storage.keys import SessionKey, session_key
from agenthub.storage.memory_files import FileMemoryStore, MemoryName, MemoryStore
from agenthub.storage.paths import inside

MULTI_USER_CHANNELS = frozenset({"wecom", "feishu"})
"""Channels where several people talk to the bot (groups, many employees): `auto` keeps their memory apart."""
R = TypeVar("R")
Visibility = Literal["private", "group"]
"""Which of a person's profiles a chat shows and feeds: the one built from private chats, or from groups."""


@dataclass(frozen=True)
class MemoryScope:
    """What one chat reads and feeds: the agent-wide MEMORY.md or the chat's own, the shared USER.md or the
    sender's own profile of this chat's visibility."""

    memory: Literal["agent", "chat"]
    profile: Literal["shared", "per_user"]
    visibility: Visibility


def chat_visibility(channel: str, chat_type: object) -> Visibility:
    """A chat on a single-user channel (CLI, HTTP console) is private; on WeCom and Feishu only a chat marked
    `chat_type = "private"` is, anything else (a group, or no mark: the safe side) is a group."""
    if channel not in MULTI_USER_CHANNELS:
        return "private"
    return "private" if chat_type == "private" else "group"


def memory_scope(agent: AgentDefinition, channel: str, chat_type: object = None) -> MemoryScope:
    """The scope of a chat of `agent` on `channel`: explicit `scope` / `user_profile` win; `auto` (the default)
    means chat memory and a per-sender profile on multi-user channels, the agent's and the shared one elsewhere."""
    options = agent.config.memory
    multi_user = channel in MULTI_USER_CHANNELS
    memory = options.scope if options.scope != "auto" else ("chat" if multi_user else "agent")
    profile = options.user_profile if options.user_profile != "auto" else ("per_user" if multi_user else "shared")
    return MemoryScope(memory, profile, chat_visibility(channel, chat_type))


class MemoryWriter:
    """One asyncio lock per memory file: every read-modify-write of a memory file (the write_memory tool, L3, the
    memory flush before a compaction) runs under its file's lock, so two writers never both read the old text and
    one of them silently drops the other's change. Readers need no lock: each write is an atomic replace.

    A file is named by its `MemoryName` (read and written through `store`) or, for the files-only callers, by its
    path; over the files a name and its path share one lock (keyed by the resolved path)."""

    def __init__(self, store: MemoryStore | None = None) -> None:
        self.store = store
        self._locks: weakref.WeakValueDictionary[Path | MemoryName, asyncio.Lock] = weakref.WeakValueDictionary()

    def _lock_key(self, target: Path | MemoryName) -> Path | MemoryName:
        if isinstance(target, Path):
            return target.resolve()
        if isinstance(self.store, FileMemoryStore):
            return self.store.path_of(target).resolve()
        return target

    def lock(self, target: Path | MemoryName) -> asyncio.Lock:
        """The lock of `target`'s file; hold it only around read-merge-write, never across a model call."""
        key = self._lock_key(target)
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock

    async def locked(self, target: Path | MemoryName, work: Callable[[], Coroutine[Any, Any, R]]) -> R:
        """Run `work()` (a read-modify-write of `target`) under the file's lock, to its end even if the caller is
        cancelled meanwhile (the caller still sees its cancellation): the lock is never released while a worker
        thread is still replacing the file, so the next writer never reads the text that replace is about to
        overwrite. Waiting for the lock is cancellable as usual."""
        async with self.lock(target):
            return await run_to_end(work())

    async def update(self, target: Path | MemoryName, change: Callable[[str], str]) -> str:
        """Under the file's lock: read it ("" when missing), write `change(text)` atomically; returns the new text.
        An exception from `change` leaves the file as it was."""

        async def read_change_write() -> str:
            new = change(await self.read(target))
            await self.write(target, new)
            return new

        return await self.locked(target, read_change_write)

    async def read(self, target: Path | MemoryName) -> str:
        return await read_text(target) if isinstance(target, Path) else await self._store().read(target)

    async def write(self, target: Path | MemoryName, text: str) -> None:
        if isinstance(target, Path):
            await write_text(target, text)
        else:
            await self._store().write(target, text)

    def _store(self) -> MemoryStore:
        if self.store is None:
            raise TypeError("this MemoryWriter has no MemoryStore: name files by their path")
        return self.store


@dataclass(frozen=True)
class MemoryFiles:
    """Resolves memory file paths through `memory_scope`; `writer` serialises the changes to each file.

    A person is a sender id on one channel. Their profiles: `auth/users/<agent>_<channel>_<sender>.md` (private:
    shown in and fed by their private chats, and the only one on single-user channels) and, per group chat,
    `auth/users/group/<chat's session stem>/<agent>_<channel>_<sender>.md` (shown in and fed by what they said in
    that group only: what one group heard never reaches another through a member's profile). Profiles of the older
    layout (`<agent>_user_<sender>.md`, no channel, one group profile for all groups) are not read any more."""

    data_dir: Path
    auth_dir: Path
    writer: MemoryWriter = field(default_factory=MemoryWriter, compare=False, repr=False)
    store: FileMemoryStore = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "store", FileMemoryStore(self.data_dir, self.auth_dir))
        if self.writer.store is None:
            self.writer.store = self.store

    def scope_for(self, agent: AgentDefinition, channel: str, chat_type: object = None) -> MemoryScope:
        """The one scope rule (`memory_scope`): every reader and writer of memory resolves a chat through it."""
        return memory_scope(agent, channel, chat_type)

    def memory_name(self, agent: AgentDefinition, key: SessionKey | None = None) -> MemoryName:
        """The MEMORY.md a chat reads and writes (the agent-wide one when `key` is None)."""
        if key is not None and self.scope_for(agent, key.channel).memory == "chat":
            return MemoryName.chat_memory(key)
        return MemoryName.agent_memory(agent.name)

    def memory_path(self, agent: AgentDefinition, key: SessionKey | None = None) -> Path:
        """Where `memory_name` lives."""
        return self.store.path_of(self.memory_name(agent, key))

    def l3_state_path(self, agent: AgentDefinition) -> Path:
        """Where L3 keeps `agent`'s watermarks (`l3_material.L3State`), beside its MEMORY.md."""
        return self.store.path_of(MemoryName.l3_state(agent.name))

    @property
    def shared_profile(self) -> Path:
        return self.store.path_of(MemoryName.shared_profile())

    def profile_path(self, agent: AgentDefinition, key: SessionKey, sender_id: str, chat_type: object) -> Path | None:
        """The profile a chat shows for its current sender: the shared USER.md, or the sender's own of this chat's
        visibility; None when the profile is per person and the message has no sender."""
        scope = self.scope_for(agent, key.channel, chat_type)
        if scope.profile == "shared":
            return self.shared_profile
        return self.person_profile(agent, key, sender_id, scope.visibility) if sender_id else None

    def person_profile(self, agent: AgentDefinition, key: SessionKey, sender_id: str, visibility: Visibility) -> Path:
        """The profile of `sender_id` on `key`'s channel with `agent` for the chat `key` (of `visibility`)."""
        return self.store.path_of(MemoryName.person_profile(agent.name, key, sender_id, visibility))

    def person_profiles(self, agent: AgentDefinition, channel: str, sender_id: str) -> tuple[Path, ...]:
        """Every profile file of one person with `agent` (for "forget me"): the private one, one per group chat,
        and those of the older layout under their sender id (unread, and not tied to a channel). Blocking: it
        lists the group directories (run it in a worker thread)."""
        users, name = self.auth_dir / "users", _profile_name(agent, channel, sender_id)
        groups = users / "group"
        chats = sorted(d.name for d in groups.iterdir() if d.is_dir() and not d.is_symlink()) if groups.is_dir() else []
        legacy = session_key(agent.name, "user", sender_id).file_stem + ".md"
        return (
            inside(users, name),
            *(inside(inside(groups, chat), name) for chat in chats),
            inside(users, legacy),
            inside(groups, legacy),
        )


def _profile_name(agent: AgentDefinition, channel: str, sender_id: str) -> str:
    return session_key(agent.name, channel, sender_id).file_stem + ".md"


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
