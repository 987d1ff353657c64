"""The files backend's per-turn reads (`read_many`) come from memory while the files are unchanged, and see every
change: this process's writes, another writer's atomic replace, an edit in place, a delete."""

from __future__ import annotations

import os
from pathlib import Path

from agenthub.storage.memory_files import FileMemoryStore, MemoryName
from agenthub.storage.read_cache import ReadCache, version_of

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


def test_a_read_begun_before_a_write_keeps_nothing_even_where_the_versions_look_alike(tmp_path: Path) -> None:
    """A coarse clock and a reused inode can make a later version look like the one a slow read saw: what a read
    that began before this process's write found is not kept."""
    path = tmp_path / "MEMORY.md"
    path.write_text("new text", encoding="utf-8")
    cache = ReadCache()
    began = cache.drops
    cache.drop(AGENT)  # this process wrote the file meanwhile
    cache.keep(AGENT, str(path), version_of(path.stat()), "old text", since=began)  # the version as it is now
    assert cache.get(AGENT) is None
    cache.keep(AGENT, str(path), version_of(path.stat()), "new text", since=cache.drops)
    assert cache.get(AGENT) == "new text"
