"""`MemoryStore`: the memory text files (MEMORY.md, USER.md, chat-scoped and per-user profiles, their `.bak`, the L3
state) by a logical `MemoryName` built only from validated parts, with the files backend (today's paths, atomic
writes) and an in-memory one."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Literal, ParamSpec, TypeVar

from agenthub.errors import InvalidIdError, StorageError
from agenthub.session_keys import SessionKey, key_from_file_stem, person_key, validate_agent_name
from agenthub.storage.atomic import atomic_write_text
from agenthub.storage.paths import AgentLayout, inside
from agenthub.storage.read_cache import ReadCache, Version, read_versioned

MemoryKind = Literal["agent_memory", "chat_memory", "shared_profile", "private_profile", "group_profile", "l3_state"]
Visibility = Literal["private", "group"]
L3_STATE_FILE = ".l3_state.json"
T = TypeVar("T")
P = ParamSpec("P")


_PARTS: dict[str, tuple[bool, bool, bool]] = {
    # kind: (agent, chat, person) required; the others must be empty
    "agent_memory": (True, False, False),
    "chat_memory": (True, True, False),
    "shared_profile": (False, False, False),
    "private_profile": (True, False, True),
    "group_profile": (True, False, True),  # chat: the group's stem, or "" for the older layout's one group profile
    "l3_state": (True, False, False),
}


def _check_stem(what: str, stem: str, agent: str) -> None:
    """`stem` must be a session key's file stem (`SessionKey.file_stem`, one-to-one) of `agent`."""
    if _stem_agent(stem) != agent:
        raise InvalidIdError(f"a memory file's {what} is not a valid name")


@functools.lru_cache(maxsize=65536)
def _stem_agent(stem: str) -> str | None:
    """The agent of the session key whose file stem is `stem`; None when no key has it (cached: every turn names
    its chat's files)."""
    key = key_from_file_stem(stem)
    return None if key is None else key.agent


@dataclass(frozen=True)
class MemoryName:
    """One memory file, named by what it is rather than where it lives. Build it with the classmethods; every
    part is checked at construction (InvalidIdError), so no name can point outside its directory."""

    kind: MemoryKind
    agent: str = ""
    chat: str = ""  # the chat's session file stem (chat memory, group profiles)
    person: str = ""  # the profile's file stem: `<agent>_<channel>_<sender>`
    backup: bool = False  # the one previous generation of a rewritten file (`<file>.bak`)

    def __post_init__(self) -> None:
        needs = _PARTS.get(self.kind)
        if needs is None:
            raise InvalidIdError("unknown memory file kind")
        needs_agent, needs_chat, needs_person = needs
        if needs_agent:
            validate_agent_name(self.agent)
        elif self.agent:
            raise InvalidIdError("this memory file has no agent")
        if needs_chat or self.chat:
            if self.kind not in ("chat_memory", "group_profile"):
                raise InvalidIdError("this memory file has no chat")
            _check_stem("chat", self.chat, self.agent)
        if needs_person:
            _check_stem("person", self.person, self.agent)
        elif self.person:
            raise InvalidIdError("this memory file has no person")
        if self.backup and self.kind == "l3_state":
            raise InvalidIdError("the L3 state keeps no backup")

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
        person = person_key(agent, key.channel, sender_id).file_stem
        if visibility == "group":
            return cls("group_profile", agent=agent, chat=key.file_stem, person=person)
        return cls("private_profile", agent=agent, person=person)

    @classmethod
    def legacy_profiles(cls, agent: str, sender_id: str) -> tuple[MemoryName, MemoryName]:
        """The older layout's profiles of `sender_id` (no channel, one group profile for all groups): never read
        any more, only deleted by "forget me"."""
        person = person_key(agent, "user", sender_id).file_stem
        return cls("private_profile", agent=agent, person=person), cls("group_profile", agent=agent, person=person)

    @classmethod
    def l3_state(cls, agent: str) -> MemoryName:
        return cls("l3_state", agent=validate_agent_name(agent))

    def backup_name(self) -> MemoryName:
        return replace(self, backup=True)

    def main_name(self) -> MemoryName:
        """The file a backup is the previous generation of (itself when it is not a backup)."""
        return replace(self, backup=False)

    @property
    def in_auth(self) -> bool:
        """Profiles live under the auth directory, the rest under the data directory."""
        return self.kind in ("shared_profile", "private_profile", "group_profile")

    @property
    def relative(self) -> PurePosixPath:
        """Where design §4 keeps it, below the auth directory (`in_auth`) or the data directory."""
        path = self._relative()
        return path.with_name(path.name + ".bak") if self.backup else path

    def _relative(self) -> PurePosixPath:
        if self.kind == "shared_profile":
            return PurePosixPath("USER.md")
        if self.kind == "private_profile":
            return PurePosixPath("users", self.person + ".md")
        if self.kind == "group_profile":
            return PurePosixPath("users", "group", *([self.chat] if self.chat else []), self.person + ".md")
        if self.kind == "chat_memory":
            return PurePosixPath(self.agent, "memory", "chats", self.chat + ".md")
        if self.kind == "l3_state":
            return PurePosixPath(self.agent, "memory", L3_STATE_FILE)
        return PurePosixPath(self.agent, "memory", "MEMORY.md")


Change = Callable[[str], str]


class NameLocks:
    """One asyncio lock per name, for the read-modify-writes of a single process's store."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[Hashable, asyncio.Lock] = weakref.WeakValueDictionary()

    def __call__(self, name: MemoryName) -> asyncio.Lock:
        key = name.main_name()  # a file and its backup change together
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock


def changed(current: str, change: Change) -> str | None:
    """The text `change` makes of `current`, None when it is the same."""
    new = change(current)
    return None if new == current else new


class FileMemoryStore:
    """Memory files at design §4's paths: `data/<agent>/memory/MEMORY.md`, `…/memory/chats/<chat>.md`,
    `auth/USER.md`, `auth/users/<person>.md`, `auth/users/group/<chat>/<person>.md`, `…/memory/.l3_state.json`."""

    def __init__(self, data_dir: Path, auth_dir: Path, *, durable: bool = True) -> None:
        self.data_dir, self.auth_dir, self.durable = data_dir, auth_dir, durable
        self._layouts: dict[str, AgentLayout] = {}
        self._locks = NameLocks()  # one process writes a data directory (its lock file): these serialise it
        self._seen = ReadCache()
        self.disk_reads = 0
        """Files `read_many` read from disk (the others came from `ReadCache`)."""

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
            groups = self.auth_dir / "users" / "group"
            return inside(inside(groups, name.chat) if name.chat else groups, name.person + ".md")
        layout = self._layout(name.agent)
        if name.kind == "chat_memory":
            return inside(layout.memory_dir / "chats", name.chat + ".md")
        if name.kind == "l3_state":
            return layout.memory_dir / L3_STATE_FILE
        return layout.memory_file

    def label(self, name: MemoryName) -> str:
        return str((self.auth_dir if name.in_auth else self.data_dir) / name.relative)

    async def read(self, name: MemoryName) -> str:
        path = self.path_of(name)
        return await _on_disk("read a memory file", _read, path)

    async def read_many(self, names: Sequence[MemoryName], *, fresh_since: float | None = None) -> list[str]:
        """The files' texts now (every turn reads its memory and profile): those unchanged since the last read here
        from `ReadCache` (one stat each), the others in one hop to a worker thread, where their paths' link checks
        (an lstat per level) are made too."""
        texts = [self._seen.get(n) for n in names]
        missing = [n for n, text in zip(names, texts, strict=True) if text is None]
        if not missing:
            return [t or "" for t in texts]
        drops = self._seen.drops
        read = await _on_disk("read a memory file", self._read_all, missing)
        for name, (path, text, version) in zip(missing, read, strict=True):
            self._seen.keep(name, path, version, text, since=drops)  # on the event loop, the cache's one thread
        self.disk_reads += len(read)
        fresh = iter(text for _, text, _ in read)
        return [next(fresh) if t is None else t for t in texts]

    def _read_all(self, names: list[MemoryName]) -> list[tuple[str, str, Version]]:
        found = []
        for name in names:
            path = self.path_of(name)
            found.append((str(path), *read_versioned(path)))
        return found

    async def write(self, name: MemoryName, text: str) -> None:
        path = self.path_of(name)
        self._seen.drop(name)
        try:
            await _on_disk("write a memory file", atomic_write_text, path, text, durable=self.durable)
        finally:
            self._seen.drop(name)  # a read during the write may have kept the old text: its version is the old file's

    async def update(self, name: MemoryName, change: Change, *, keep_backup: bool = False) -> str:
        async with self._locks(name):
            current = await self.read(name)
            new = changed(current, change)
            if new is None:
                return current
            if keep_backup and current:
                await self.write(name.backup_name(), current)
            await self.write(name, new)
            return new

    async def delete(self, name: MemoryName) -> bool:
        path = self.path_of(name)
        async with self._locks(name):
            try:
                return await _on_disk("delete a memory file", _unlink, path)
            finally:
                self._seen.drop(name)

    async def group_profiles(self, person: str) -> list[MemoryName]:
        person_key = key_from_file_stem(person)
        if person_key is None:
            return []
        groups = self.auth_dir / "users" / "group"
        files = (person + ".md", person + ".md.bak")
        chats = await _on_disk("list the group profiles", _dirs_holding, groups, files)
        names = []
        for chat in chats:
            with contextlib.suppress(InvalidIdError):  # a directory this product never made
                names.append(MemoryName("group_profile", agent=person_key.agent, chat=chat, person=person))
        return names


class InMemoryMemoryStore:
    """Memory files in a dict, for tests. `fail_writes` makes every write raise StorageError, changing nothing."""

    def __init__(self) -> None:
        self._texts: dict[MemoryName, str] = {}
        self._locks = NameLocks()
        self.fail_writes = False

    def label(self, name: MemoryName) -> str:
        return f"memory:{'auth' if name.in_auth else 'data'}/{name.relative}"

    async def read(self, name: MemoryName) -> str:
        text = self._texts.get(name, "")
        await asyncio.sleep(0)  # a real backend yields between reading and answering: unserialised writers race
        return text

    async def read_many(self, names: Sequence[MemoryName], *, fresh_since: float | None = None) -> list[str]:
        return [await self.read(n) for n in names]

    async def write(self, name: MemoryName, text: str) -> None:
        if self.fail_writes:
            raise StorageError("could not write a memory file: writes are failing")
        self._texts[name] = text

    async def update(self, name: MemoryName, change: Change, *, keep_backup: bool = False) -> str:
        async with self._locks(name):
            current = await self.read(name)
            new = changed(current, change)
            if new is None:
                return current
            if self.fail_writes:
                raise StorageError("could not write a memory file: writes are failing")
            if keep_backup and current:
                self._texts[name.backup_name()] = current
            self._texts[name] = new
            return new

    async def delete(self, name: MemoryName) -> bool:
        return self._texts.pop(name, None) is not None

    async def group_profiles(self, person: str) -> list[MemoryName]:
        found = (n for n in self._texts if n.kind == "group_profile" and n.person == person and not n.backup)
        return sorted(found, key=lambda n: n.chat)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def _dirs_holding(directory: Path, names: tuple[str, ...]) -> list[str]:
    """The real (not linked) directories in `directory` holding one of `names` (none when it is missing or a
    link)."""
    if not directory.is_dir() or directory.is_symlink():
        return []
    found = (d for d in directory.iterdir() if d.is_dir() and not d.is_symlink())
    return sorted(d.name for d in found if any(os.path.lexists(d / n) for n in names))


def _unlink(path: Path) -> bool:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        return True
    return False


async def _on_disk(what: str, operation: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """A blocking file operation in a worker thread; an OSError there (a full or read-only disk) is StorageError."""
    try:
        return await asyncio.to_thread(operation, *args, **kwargs)
    except OSError as e:
        raise StorageError(f"could not {what}") from e
