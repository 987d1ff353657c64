"""`store migrate`'s memory files: every file of design §4 that exists (and each one's `.bak`), by its name."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

from agenthub.errors import InvalidIdError
from agenthub.session_keys import key_from_file_stem
from agenthub.storage.copy_run import Checked, CopyRun, Held, agent_dirs, digest_of
from agenthub.storage.memory_files import L3_STATE_FILE, FileMemoryStore, MemoryKind, MemoryName


async def copy_memory_files(run: CopyRun, data_dir: Path, auth_dir: Path) -> None:
    files, target = FileMemoryStore(data_dir, auth_dir), run.target.memory
    recorded = await run.target.ledger.digests("memory_files")
    present = {memory_item(n) for n in await target.names()}
    for name in await asyncio.to_thread(lambda: list(memory_names(data_dir, auth_dir))):
        text, item_id = await files.read(name), memory_item(name)
        held = Held(digest_of(await target.read(name)) if item_id in present else None)

        async def write(name: MemoryName = name, text: str = text) -> None:
            await target.write(name, text)

        item = Checked("memory_files", item_id, digest_of(text), {"memory_files": 1})
        await run.settle(item, held, recorded.get(item_id), write, f"copied memory file {item_id}")


def memory_item(name: MemoryName) -> str:
    return "/".join((name.kind, name.agent, name.chat, name.person, ".bak" if name.backup else ""))


def memory_names(data_dir: Path, auth_dir: Path) -> Iterator[MemoryName]:
    """Every memory file of design §4 that exists, by its name (and each one's `.bak`)."""
    for name in _primary_memory_names(data_dir, auth_dir):
        yield name
    for path, name in _backups(data_dir, auth_dir):
        if path.is_file():
            yield name


def _primary_memory_names(data_dir: Path, auth_dir: Path) -> Iterator[MemoryName]:
    for agent in agent_dirs(data_dir):
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
