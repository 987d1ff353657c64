"""Symbolic links inside data/ are refused when a file is written, not only when its path is first checked."""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agenthub.agent.definition import load_agent
from agenthub.errors import StorageError
from agenthub.memory.files import MemoryFiles
from agenthub.session.history import SessionHistory
from agenthub.session_keys import session_key
from agenthub.storage import jsonl
from agenthub.storage.paths import AgentLayout
from tests.support.agents import write_agent

KEY = session_key("default", "http", "a")


def _history(tmp_path: Path) -> SessionHistory:
    return SessionHistory(tmp_path / "data", fsync=False)


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def _outside(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    return outside


async def test_an_archive_directory_linked_outside_receives_nothing(tmp_path: Path) -> None:
    history, outside = _history(tmp_path), _outside(tmp_path)
    await history.append(KEY, _user("secret one"))
    await history.clear(KEY)  # a first /restart: the archive directory exists, its path was checked once
    await history.append(KEY, _user("secret two"))
    archive = history.layout("default").archive_dir
    for entry in archive.iterdir():
        entry.unlink()
    archive.rmdir()
    archive.symlink_to(outside, target_is_directory=True)
    with pytest.raises(StorageError):
        await history.clear(KEY)  # the second /restart
    assert list(outside.iterdir()) == []
    assert [m["content"] for m in await history.load(KEY)] == ["secret two"]  # nothing lost either


async def test_a_session_file_swapped_for_a_link_while_running_is_not_written_through(tmp_path: Path) -> None:
    history, outside = _history(tmp_path), _outside(tmp_path)
    await history.append(KEY, _user("one"))
    path = history.layout("default").history_file(KEY)
    target = outside / "target.jsonl"
    target.write_text("")
    path.unlink()
    path.symlink_to(target)
    with pytest.raises(StorageError):
        await history.append(KEY, _user("two"))
    assert target.read_text() == ""
    assert [m["content"] for m in await history.load(KEY)] == ["one"]  # the cache did not take it either


async def test_a_meta_file_swapped_for_a_link_refuses_the_next_append_before_anything_is_written(
    tmp_path: Path,
) -> None:
    history, outside = _history(tmp_path), _outside(tmp_path)
    await history.append(KEY, _user("one"))
    layout = history.layout("default")
    meta, target = layout.meta_file(KEY), outside / "target.json"
    target.write_text("{}")
    meta.unlink()
    meta.symlink_to(target)
    with pytest.raises(StorageError):
        await history.append(KEY, _user("two"))
    assert [r["content"] for r in jsonl.read_records(layout.history_file(KEY))] == ["one"]
    assert target.read_text() == "{}"


async def test_a_sessions_directory_swapped_for_a_link_is_refused_for_every_write(tmp_path: Path) -> None:
    history, outside = _history(tmp_path), _outside(tmp_path)
    await history.append(KEY, _user("one"))
    await history.update_meta(KEY, pinned=True)
    sessions = history.layout("default").sessions_dir
    sessions.rename(tmp_path / "moved-away")
    sessions.symlink_to(outside, target_is_directory=True)
    writes = (
        lambda: history.append(KEY, _user("two")),
        lambda: history.update_meta(KEY, title="t"),
        lambda: history.replace(KEY, []),
        lambda: history.clear(KEY),
    )
    for write in writes:
        with pytest.raises(StorageError):
            await write()
    assert list(outside.iterdir()) == []


async def test_a_linked_agent_directory_is_refused(tmp_path: Path) -> None:
    history, outside = _history(tmp_path), _outside(tmp_path)
    await history.append(KEY, _user("one"))
    root = history.layout("default").root
    root.rename(tmp_path / "moved-away")
    root.symlink_to(outside, target_is_directory=True)
    with pytest.raises(StorageError):
        await history.append(KEY, _user("two"))
    with pytest.raises(StorageError):
        AgentLayout(tmp_path / "data", "default").memory_file  # noqa: B018 (the property is the check)
    assert list(outside.iterdir()) == []


def test_reads_and_appends_do_not_follow_a_linked_file(tmp_path: Path) -> None:
    outside = _outside(tmp_path)
    target = outside / "t.jsonl"
    jsonl.append_records(target, [{"n": 1}])
    link = tmp_path / "s.jsonl"
    link.symlink_to(target)
    with pytest.raises(StorageError):
        jsonl.append_records(link, [{"n": 2}])
    with pytest.raises(StorageError):
        jsonl.read_records(link)
    assert jsonl.read_records(target) == [{"n": 1}]


async def test_listing_skips_a_linked_session_and_logs_it(tmp_path: Path) -> None:
    history, outside = _history(tmp_path), _outside(tmp_path)
    good, bad = session_key("default", "http", "good"), session_key("default", "http", "bad")
    await history.append(good, _user("fine"))
    jsonl.append_records(outside / "x.jsonl", [_user("not ours")])
    history.layout("default").history_file(good).with_name(bad.file_stem + ".jsonl").symlink_to(outside / "x.jsonl")
    fresh = _history(tmp_path)  # a restart: nothing cached
    with capture_logs() as logs:
        listed = await fresh.list_sessions("default", channel="http")
    assert [key for key, _ in listed] == [good]
    assert next(e for e in logs if e["event"] == "session_entry_refused")["file"] == bad.file_stem
    assert sorted(p.name for p in outside.iterdir()) == ["x.jsonl"]  # no meta was written out there


async def test_a_linked_chat_memory_directory_is_refused(tmp_path: Path) -> None:
    write_agent(tmp_path / "agents", "private", {"memory": {"scope": "chat"}})
    agent = load_agent(tmp_path / "agents" / "private")
    files, key = MemoryFiles(tmp_path / "data", tmp_path / "auth"), session_key("private", "http", "a")
    name = files.memory_name(agent, key)
    chats = tmp_path / "data/private/memory/chats"
    chats.mkdir(parents=True)
    assert files.file_of(name) == chats.resolve() / f"{key.file_stem}.md"  # checked once while a real directory
    chats.rmdir()
    outside = _outside(tmp_path)
    chats.symlink_to(outside, target_is_directory=True)
    with pytest.raises(StorageError):
        files.file_of(name)
    with pytest.raises(StorageError):
        await files.writer.update(name, lambda text: text + "x")
    assert list(outside.iterdir()) == []


def test_an_agent_memory_directory_swapped_for_a_link_after_a_first_use_is_refused(tmp_path: Path) -> None:
    write_agent(tmp_path / "agents", "default", {})
    agent = load_agent(tmp_path / "agents" / "default")
    files = MemoryFiles(tmp_path / "data", tmp_path / "auth")
    name = files.memory_name(agent)
    memory_dir = tmp_path / "data/default/memory"
    memory_dir.mkdir(parents=True)
    files.file_of(name)  # the agent's layout is made and kept
    memory_dir.rmdir()
    memory_dir.symlink_to(_outside(tmp_path), target_is_directory=True)
    with pytest.raises(StorageError):
        files.file_of(name)
