"""The files backend's per-turn reads (`read_many`) come from memory while the files are unchanged, and see every
change: this process's writes, another writer's atomic replace, an edit in place, a delete."""

from __future__ import annotations

import os
from pathlib import Path

from agenthub.storage.memory_files import FileMemoryStore, MemoryName

AGENT = MemoryName.agent_memory("default")
USER = MemoryName.shared_profile()


def _store(tmp_path: Path) -> FileMemoryStore:
    return FileMemoryStore(tmp_path / "data", tmp_path / "auth", durable=False)


async def test_unchanged_files_are_read_once(tmp_path: Path) -> None:
    store = _store(tmp_path)
    await store.write(AGENT, "facts")
    assert await store.read_many([AGENT, USER]) == ["facts", ""]
    reads = store.disk_reads
    assert await store.read_many([AGENT, USER]) == ["facts", ""]
    assert await store.read_many([USER, AGENT]) == ["", "facts"]
    assert store.disk_reads == reads


async def test_own_writes_and_deletes_are_seen(tmp_path: Path) -> None:
    store = _store(tmp_path)
    await store.write(AGENT, "one")
    assert await store.read_many([AGENT]) == ["one"]
    await store.write(AGENT, "two")
    assert await store.read_many([AGENT]) == ["two"]
    await store.update(AGENT, lambda text: text + " three")
    assert await store.read_many([AGENT]) == ["two three"]
    await store.delete(AGENT)
    assert await store.read_many([AGENT]) == [""]


async def test_another_writers_changes_are_seen(tmp_path: Path) -> None:
    store, other = _store(tmp_path), _store(tmp_path)
    await store.write(USER, "")
    assert await store.read_many([AGENT, USER]) == ["", ""]
    await other.write(AGENT, "from the CLI")  # an atomic replace: a new file where none was
    await other.write(USER, "profile")
    assert await store.read_many([AGENT, USER]) == ["from the CLI", "profile"]
    path = store.path_of(AGENT)
    with path.open("r+") as f:  # an edit in place, same inode, same size
        f.write("FROM")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert await store.read_many([AGENT]) == ["FROM the CLI"]
    path.unlink()
    assert await store.read_many([AGENT, USER]) == ["", "profile"]
