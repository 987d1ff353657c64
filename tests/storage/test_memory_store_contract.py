"""The MemoryStore contract (memory text files by logical name) on every backend in MEMORY_STORE_FACTORIES, and
the per-file serialised writer over it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agenthub.errors import PathRefusedError, StorageError
from agenthub.memory.files import MemoryWriter
from agenthub.storage.keys import session_key
from agenthub.storage.memory_files import FileMemoryStore, MemoryName
from tests.support.stores import MemoryBackend

GROUP = session_key("default", "wecom", "group-1")
PRIVATE = session_key("default", "wecom", "alice")
PAD = "记" * 3000  # more than a page: it never fits what a full disk has left

NAMES = [
    MemoryName.agent_memory("default"),
    MemoryName.chat_memory(GROUP),
    MemoryName.shared_profile(),
    MemoryName.person_profile("default", PRIVATE, "alice", "private"),
    MemoryName.person_profile("default", GROUP, "alice", "group"),
    MemoryName.l3_state("default"),
    MemoryName.agent_memory("default").backup_name(),
    MemoryName.agent_memory("other"),
]


async def test_a_missing_file_reads_as_empty(memory_backend: MemoryBackend) -> None:
    assert await memory_backend.store.read(MemoryName.agent_memory("default")) == ""
    assert await memory_backend.store.delete(MemoryName.shared_profile()) is False


async def test_every_name_is_its_own_file_and_survives_a_restart(memory_backend: MemoryBackend) -> None:
    for i, name in enumerate(NAMES):
        await memory_backend.store.write(name, f"# {name.kind} {i}\n- 用户喜欢简短的回答 😀\n")
    store = memory_backend.reopen()
    assert [await store.read(n) for n in NAMES] == [
        f"# {n.kind} {i}\n- 用户喜欢简短的回答 😀\n" for i, n in enumerate(NAMES)
    ]
    assert await store.delete(NAMES[1]) is True
    assert await store.read(NAMES[1]) == "" and await store.read(NAMES[0]) != ""


async def test_a_failing_write_leaves_the_old_text(memory_backend: MemoryBackend) -> None:
    name = MemoryName.chat_memory(GROUP)
    await memory_backend.store.write(name, "old")
    with memory_backend.failing_writes(), pytest.raises(StorageError):
        await memory_backend.store.write(name, PAD)
    assert await memory_backend.reopen().read(name) == "old"


async def test_16_read_modify_writes_of_one_file_lose_nothing(memory_backend: MemoryBackend) -> None:
    writer = MemoryWriter(memory_backend.store)
    name = MemoryName.agent_memory("default")
    start = asyncio.Event()

    async def add(i: int) -> None:
        await start.wait()
        await writer.update(name, lambda text: text + f"- fact {i}\n")

    tasks = [asyncio.create_task(add(i)) for i in range(16)]
    await asyncio.sleep(0)
    start.set()  # all 16 released together: each reads, changes and writes the same file
    await asyncio.gather(*tasks)
    lines = (await memory_backend.reopen().read(name)).splitlines()
    assert sorted(lines) == sorted(f"- fact {i}" for i in range(16))


async def test_files_a_name_and_its_path_share_one_lock(tmp_path: Path) -> None:
    store = FileMemoryStore(tmp_path / "data", tmp_path / "auth")
    writer = MemoryWriter(store)
    name = MemoryName.person_profile("default", GROUP, "alice", "group")
    start = asyncio.Event()

    async def add(i: int) -> None:
        await start.wait()
        target = name if i % 2 else store.path_of(name)  # the files-only callers still name it by path
        await writer.update(target, lambda text: text + f"{i}\n")

    tasks = [asyncio.create_task(add(i)) for i in range(16)]
    await asyncio.sleep(0)
    start.set()
    await asyncio.gather(*tasks)
    assert sorted((await store.read(name)).split()) == sorted(str(i) for i in range(16))


def test_files_names_live_at_design_4_paths(tmp_path: Path) -> None:
    data, auth = tmp_path / "data", tmp_path / "auth"
    store = FileMemoryStore(data, auth)
    assert [store.path_of(n) for n in NAMES] == [
        data / "default/memory/MEMORY.md",
        data / "default/memory/chats/default_wecom_group-1.md",
        auth / "USER.md",
        auth / "users/default_wecom_alice.md",
        auth / "users/group/default_wecom_group-1/default_wecom_alice.md",
        data / "default/memory/.l3_state.json",
        data / "default/memory/MEMORY.md.bak",
        data / "other/memory/MEMORY.md",
    ]


async def test_files_a_planted_link_is_refused(tmp_path: Path) -> None:
    store = FileMemoryStore(tmp_path / "data", tmp_path / "auth")
    (tmp_path / "data/default/memory").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "data/default/memory/chats").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PathRefusedError):
        await store.write(MemoryName.chat_memory(GROUP), "x")
    assert list((tmp_path / "elsewhere").iterdir()) == []
