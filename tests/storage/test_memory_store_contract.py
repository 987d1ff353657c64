"""The MemoryStore contract (memory text files by logical name) on every backend in MEMORY_STORE_FACTORIES, and
the per-file serialised writer over it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agenthub.errors import InvalidIdError, PathRefusedError, StorageError
from agenthub.memory.files import MemoryWriter
from agenthub.session_keys import session_key
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


async def test_16_updates_straight_on_the_store_lose_nothing(memory_backend: MemoryBackend) -> None:
    name = MemoryName.person_profile("default", GROUP, "alice", "group")
    start = asyncio.Event()

    async def add(i: int) -> str:
        await start.wait()
        return await memory_backend.store.update(name, lambda text: text + f"{i}\n")

    tasks = [asyncio.create_task(add(i)) for i in range(16)]
    await asyncio.sleep(0)
    start.set()
    answers = await asyncio.gather(*tasks)
    stored = await memory_backend.reopen().read(name)
    assert sorted(stored.split()) == sorted(str(i) for i in range(16))
    assert stored in answers  # each update answers the text it stored; the last one's is what is there


async def test_an_update_keeps_the_replaced_text_as_the_backup_and_a_failing_change_changes_nothing(
    memory_backend: MemoryBackend,
) -> None:
    store, name = memory_backend.store, MemoryName.chat_memory(GROUP)
    assert await store.update(name, lambda text: text + "first\n", keep_backup=True) == "first\n"
    assert await store.read(name.backup_name()) == ""  # nothing was replaced
    assert await store.update(name, lambda text: "second\n", keep_backup=True) == "second\n"
    assert await store.update(name, lambda text: text) == "second\n"  # unchanged: nothing written

    def refuse(text: str) -> str:
        raise ValueError("over the limit")

    with pytest.raises(ValueError, match="over the limit"):
        await store.update(name, refuse, keep_backup=True)
    reopened = memory_backend.reopen()
    assert (await reopened.read(name), await reopened.read(name.backup_name())) == ("second\n", "first\n")


async def test_a_failing_update_leaves_the_file_and_its_backup(memory_backend: MemoryBackend) -> None:
    name = MemoryName.agent_memory("default")
    await memory_backend.store.write(name, "old")
    with memory_backend.failing_writes(), pytest.raises(StorageError):
        await memory_backend.store.update(name, lambda text: PAD, keep_backup=True)
    reopened = memory_backend.reopen()
    assert (await reopened.read(name), await reopened.read(name.backup_name())) == ("old", "")


async def test_group_profiles_lists_one_person_s_profile_of_every_group(memory_backend: MemoryBackend) -> None:
    store = memory_backend.store
    other_group = session_key("default", "wecom", "group-2")
    alice = [MemoryName.person_profile("default", g, "alice", "group") for g in (GROUP, other_group)]
    bob = MemoryName.person_profile("default", GROUP, "bob", "group")
    for name in [*alice, bob, MemoryName.person_profile("default", PRIVATE, "alice", "private")]:
        await store.write(name, "x")
    await store.write(alice[0].backup_name(), "older")
    assert sorted(await store.group_profiles(alice[0].person), key=lambda n: n.chat) == alice
    assert await store.group_profiles(bob.person) == [bob]
    assert await store.group_profiles(MemoryName.person_profile("default", GROUP, "carol", "group").person) == []


async def test_read_many_reads_each_and_labels_are_one_to_one(memory_backend: MemoryBackend) -> None:
    store = memory_backend.store
    await store.write(NAMES[0], "a")
    await store.write(NAMES[2], "c")
    assert await store.read_many(NAMES[:3]) == ["a", "", "c"]
    assert await store.read_many([NAMES[2], NAMES[0], NAMES[2], NAMES[0].backup_name()]) == ["c", "a", "c", ""]
    assert await store.read_many([]) == []
    assert len({store.label(n) for n in NAMES}) == len(NAMES)


@pytest.mark.parametrize(
    ("kind", "parts"),
    [
        ("chat_memory", {"agent": "default", "chat": "../../../auth/USER"}),
        ("chat_memory", {"agent": "default", "chat": "other_wecom_group-1"}),  # another agent's chat
        ("agent_memory", {"agent": ".."}),
        ("private_profile", {"agent": "default", "person": "default_wecom_..~2f..~2fx"}),
        ("private_profile", {"agent": "default", "person": "a/b"}),
        ("group_profile", {"agent": "default", "chat": "..", "person": "default_wecom_alice"}),
        ("shared_profile", {"person": "default_wecom_alice"}),
        ("l3_state", {"agent": "default", "chat": "default_wecom_group-1"}),
    ],
)
async def test_a_name_of_traversal_parts_is_refused_before_it_reaches_the_store(
    memory_backend: MemoryBackend, kind: str, parts: dict[str, str]
) -> None:
    with pytest.raises(InvalidIdError):
        MemoryName(kind, **parts)  # type: ignore[arg-type]
    odd = MemoryName.person_profile("default", GROUP, "../../etc/passwd", "private")  # a sender id names no path:
    assert odd.person.startswith("default_wecom_~7esha256-")  # it is named by its digest (session_keys.person_key)
    assert "/" not in odd.person and ".." not in odd.person
    assert await memory_backend.store.group_profiles("default_wecom_../x") == []


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
