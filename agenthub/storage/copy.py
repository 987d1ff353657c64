"""`agenthub store migrate --from files --to postgres`: copy a files deployment's state into PostgreSQL. Idempotent
and resumable: what is there already (same counts) is skipped, so a run cut short is simply run again."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from agenthub.errors import InvalidIdError
from agenthub.storage.files import FileSessionStore
from agenthub.storage.inbox import FileInbox
from agenthub.storage.keys import SessionKey, key_from_file_stem, validate_agent_name
from agenthub.storage.memory_files import L3_STATE_FILE, FileMemoryStore, MemoryKind, MemoryName
from agenthub.storage.postgres import PostgresInbox, PostgresMemoryStore, PostgresSessionStore, PostgresTokens
from agenthub.tokens import TokenStore

Report = Callable[[str], None]


@dataclass
class Counts:
    """What the source holds, what the target holds of it, and what this run copied."""

    sessions: int = 0
    records: int = 0
    archived: int = 0
    memory_files: int = 0
    tokens: int = 0
    inbox: int = 0
    copied: dict[str, int] = field(default_factory=dict)

    def figures(self) -> dict[str, int]:
        return {
            "sessions": self.sessions,
            "records": self.records,
            "archived": self.archived,
            "memory_files": self.memory_files,
            "tokens": self.tokens,
            "inbox": self.inbox,
        }

    def add_copied(self, what: str) -> None:
        self.copied[what] = self.copied.get(what, 0) + 1


@dataclass
class Target:
    sessions: PostgresSessionStore
    memory: PostgresMemoryStore
    tokens: PostgresTokens
    inbox: PostgresInbox


async def copy_files_to_postgres(data_dir: Path, auth_dir: Path, target: Target, report: Report) -> Counts:
    """Copy every session (history, archive, meta), memory file, API token and unanswered inbox entry; the
    source's counts (`Counts.figures`) with what was copied now."""
    counts = Counts()
    source = FileSessionStore(data_dir)
    for agent in _agents(data_dir):
        for key in await source.list_keys(agent):
            await _copy_session(source, target.sessions, key, counts, report)
    files = FileMemoryStore(data_dir, auth_dir)
    for name in await asyncio.to_thread(lambda: list(memory_names(data_dir, auth_dir))):
        text = await files.read(name)
        counts.memory_files += 1
        if await target.memory.read(name) != text:
            await target.memory.write(name, text)
            counts.add_copied("memory_files")
    for token in await asyncio.to_thread(TokenStore(auth_dir).stored):
        counts.tokens += 1
        if await target.tokens.add(token):
            counts.add_copied("tokens")
    inbox = FileInbox(data_dir)
    try:
        for entry in await inbox.unsettled():
            counts.inbox += 1
            if await target.inbox.restore(entry):
                counts.add_copied("inbox")
    finally:
        await inbox.aclose()
    return counts


async def _copy_session(
    source: FileSessionStore, target: PostgresSessionStore, key: SessionKey, counts: Counts, report: Report
) -> None:
    """One session, skipped when the target has as many records and archived records and its meta. The meta is
    written last, so a copy cut short before it is redone whole."""
    records, archived, meta = await source.load(key), await source.read_archive(key), await source.read_meta(key)
    counts.sessions += 1
    counts.records += len(records)
    counts.archived += len(archived)
    copied_meta = await target.read_meta(key)
    if (
        (copied_meta is not None or meta is None)
        and len(await target.load(key)) == len(records)
        and len(await target.read_archive(key)) == len(archived)
        and await target.exists(key)
    ):
        return
    await target.rewrite_archive(key, archived)
    await target.replace(key, records, archive=[])
    if meta is not None:
        await target.write_meta(key, meta, durable=True)
    counts.add_copied("sessions")
    report(f"copied {key} ({len(records)} records, {len(archived)} archived)")


async def verify(data_dir: Path, target: Target, counts: Counts) -> dict[str, int]:
    """The target's counts of what the source holds (equal to `counts.figures()` after a complete copy)."""
    found = {"sessions": 0, "records": 0, "archived": 0}
    source = FileSessionStore(data_dir)
    for agent in _agents(data_dir):
        for key in await source.list_keys(agent):
            if await target.sessions.exists(key):
                found["sessions"] += 1
                found["records"] += len(await target.sessions.load(key))
                found["archived"] += len(await target.sessions.read_archive(key))
    found["memory_files"] = len(await target.memory.names())
    found["tokens"] = len(await target.tokens.stored())
    found["inbox"] = await target.inbox.count()
    return found


def _agents(data_dir: Path) -> list[str]:
    if not data_dir.is_dir():
        return []
    names = []
    for child in sorted(data_dir.iterdir()):
        if child.is_dir() and not child.is_symlink() and not child.name.startswith("."):
            try:
                names.append(validate_agent_name(child.name))
            except ValueError:
                continue
    return names


def memory_names(data_dir: Path, auth_dir: Path) -> Iterator[MemoryName]:
    """Every memory file of design §4 that exists, by its name (and each one's `.bak`)."""
    for name in _primary_memory_names(data_dir, auth_dir):
        yield name
    for path, name in _backups(data_dir, auth_dir):
        if path.is_file():
            yield name


def _primary_memory_names(data_dir: Path, auth_dir: Path) -> Iterator[MemoryName]:
    for agent in _agents(data_dir):
        memory_dir = data_dir / agent / "memory"
        if (memory_dir / "MEMORY.md").is_file():
            yield MemoryName.agent_memory(agent)
        if (memory_dir / L3_STATE_FILE).is_file():
            yield MemoryName.l3_state(agent)
        for path in _files(memory_dir / "chats", ".md"):
            yield from _named("chat_memory", agent=agent, chat=path.stem)
    if (auth_dir / "USER.md").is_file():
        yield MemoryName.shared_profile()
    for path in _files(auth_dir / "users", ".md"):
        person = key_from_file_stem(path.stem)
        if person is not None:
            yield from _named("private_profile", agent=person.agent, person=path.stem)
    group_dir = auth_dir / "users" / "group"
    for chat_dir in sorted(group_dir.iterdir()) if group_dir.is_dir() else []:
        for path in _files(chat_dir, ".md") if chat_dir.is_dir() and not chat_dir.is_symlink() else []:
            person = key_from_file_stem(path.stem)
            if person is not None:
                yield from _named("group_profile", agent=person.agent, chat=chat_dir.name, person=path.stem)


def _named(kind: MemoryKind, *, agent: str, chat: str = "", person: str = "") -> Iterator[MemoryName]:
    """The name of a file found on disk; none for a file name this product never made (an invalid part)."""
    with contextlib.suppress(InvalidIdError):
        yield MemoryName(kind, agent=agent, chat=chat, person=person)


def _backups(data_dir: Path, auth_dir: Path) -> Iterator[tuple[Path, MemoryName]]:
    files = FileMemoryStore(data_dir, auth_dir)
    for name in list(_primary_memory_names(data_dir, auth_dir)):
        if name.kind != "l3_state":
            backup = name.backup_name()
            yield files.path_of(backup), backup


def _files(directory: Path, suffix: str) -> list[Path]:
    if not directory.is_dir() or directory.is_symlink():
        return []
    return [p for p in sorted(directory.iterdir()) if p.suffix == suffix and p.is_file() and not p.is_symlink()]
