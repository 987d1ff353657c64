"""The SessionStore contract: every backend in STORE_FACTORIES passes the same suite."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from agenthub.errors import StorageError
from agenthub.session_keys import SessionKey, session_key
from agenthub.storage.files import FileSessionStore
from agenthub.storage.meta import SessionMeta
from agenthub.storage.ports import SessionStore
from agenthub.storage.store import MalformedRecordError
from tests.support.crash_writer import text_for
from tests.support.disks import fill, small_tmpfs
from tests.support.paths import CRASH_WRITER_SCRIPT, REPO
from tests.support.stores import Backend

KEY = session_key("default", "http", "chat-1")
OTHER = session_key("default", "wecom", "张三")
PAD = "页" * 3000  # 9 KB in UTF-8: more than a page, so it never fits what a full disk has left
WRITER = CRASH_WRITER_SCRIPT


def _msg(text: str, role: str = "user", **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": text, **extra}


async def test_an_unknown_session_is_empty(backend: Backend) -> None:
    store = backend.store
    assert await store.load(KEY) == [] and await store.read_archive(KEY) == []
    assert await store.read_meta(KEY) is None and not await store.exists(KEY)
    assert await store.list_keys("default") == [] and await store.activity("default") == []
    assert await store.delete(KEY) is False


async def test_appends_load_in_order_and_survive_a_restart(backend: Backend) -> None:
    await backend.store.append(KEY, [_msg("one", timestamp=1)])
    await backend.store.append(KEY, [_msg("two", "assistant", timestamp=2), _msg("three", timestamp=3)])
    expected = [_msg("one", timestamp=1), _msg("two", "assistant", timestamp=2), _msg("three", timestamp=3)]
    assert await backend.store.load(KEY) == expected
    assert await backend.reopen().load(KEY) == expected


async def test_stored_records_cannot_be_changed_by_the_caller(backend: Backend) -> None:
    blocks = [{"type": "text", "text": "原文"}]
    record = _msg("", "assistant")
    record["content"] = blocks
    await backend.store.append(KEY, [record])
    blocks[0]["text"] = "changed after the append"
    loaded = await backend.store.load(KEY)
    loaded[0]["content"][0]["text"] = "changed after the load"
    assert (await backend.store.load(KEY))[0]["content"] == [{"type": "text", "text": "原文"}]


async def test_unicode_and_control_characters_round_trip(backend: Backend) -> None:
    text = '换行\n制表\t空\x00 escape\x1b[31m 行分隔\u2028段分隔\u2029 emoji 😀 quote" backslash\\ 𠜎'
    record = _msg(text, sender_id="ユーザー\u200b", timestamp=7)
    await backend.store.append(OTHER, [record])
    assert await backend.reopen().load(OTHER) == [record]


async def test_a_record_holding_a_lone_surrogate_round_trips(backend: Backend) -> None:
    """A message may hold a lone surrogate (JSON input escapes one): kept as an escape on every backend, not a
    UnicodeEncodeError on one of them."""
    record = _msg("lone \ud800 and \udfff, then 😀", sender_id="\udc00", timestamp=7)
    await backend.store.append(OTHER, [record, _msg("next", timestamp=8)])
    await backend.store.replace(KEY, [record], archive=[record])
    reopened = backend.reopen()
    assert await reopened.load(OTHER) == [record, _msg("next", timestamp=8)]
    assert await reopened.load(KEY) == [record] and await reopened.read_archive(KEY) == [record]


@pytest.mark.parametrize("text", ["lone \ud800", "nul \x00", "pair \ud83d\ude00 typed \\ud800"])
async def test_the_meta_reads_back_whatever_the_newest_record_holds(backend: Backend, text: str) -> None:
    """The meta's `updated_at` is caught up from the newest record: one holding a lone surrogate or a NUL must not
    make the meta unreadable (on PostgreSQL the session then failed every read of its meta: listings, a turn
    elsewhere)."""
    meta = SessionMeta(chat_id=KEY.chat_id, title="t", created_at=1, updated_at=2)
    await backend.store.write_meta(KEY, meta, durable=True)
    await backend.store.append(KEY, [_msg(text, timestamp=5)])
    assert await backend.reopen().read_meta(KEY) == meta.with_changes(updated_at=5)


async def test_a_failing_append_stores_nothing_and_a_retry_lands_once(backend: Backend) -> None:
    await backend.store.append(KEY, [_msg("before", timestamp=1)])
    batch = [_msg("small", timestamp=2), _msg(PAD, "assistant", timestamp=3)]
    with backend.failing_writes():
        with pytest.raises(StorageError):
            await backend.store.append(KEY, batch)
        assert await backend.store.load(KEY) == [_msg("before", timestamp=1)]
    assert await backend.reopen().load(KEY) == [_msg("before", timestamp=1)]
    await backend.store.append(KEY, batch)
    assert await backend.reopen().load(KEY) == [_msg("before", timestamp=1), *batch]


@pytest.mark.parametrize(
    "bad",
    [
        {"role": "bot", "content": "no such role"},
        {"content": "no role"},
        {"role": "user"},
        {"role": "user", "content": 42},
        {"role": "user", "content": ["not a block"]},
        "not an object",
    ],
)
async def test_malformed_records_are_refused_whole(backend: Backend, bad: Any) -> None:
    with pytest.raises(MalformedRecordError) as refused:
        await backend.store.append(KEY, [_msg("good"), bad])
    assert isinstance(refused.value, StorageError) and isinstance(refused.value, ValueError)
    with pytest.raises(MalformedRecordError):
        await backend.store.replace(KEY, [bad], archive=[])
    assert await backend.store.load(KEY) == [] and not await backend.store.exists(KEY)


async def test_the_summary_role_and_content_blocks_are_accepted(backend: Backend) -> None:
    records = [
        _msg("[历史摘要] earlier", "system"),
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "x", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
    ]
    await backend.store.append(KEY, records)
    assert await backend.store.load(KEY) == records


async def test_replace_archives_first_and_the_archive_grows(backend: Backend) -> None:
    old = [_msg(f"m{i}", timestamp=i) for i in range(4)]
    await backend.store.append(KEY, old)
    summary = _msg("[历史摘要] m0-m1", "system", timestamp=10)
    await backend.store.replace(KEY, [summary, *old[2:]], archive=old[:2])
    await backend.store.replace(KEY, [summary], archive=old[2:])
    store = backend.reopen()
    assert await store.load(KEY) == [summary]
    assert await store.read_archive(KEY) == old


async def test_a_failing_replace_leaves_history_and_archive_as_they_were(backend: Backend) -> None:
    old = [_msg("one", timestamp=1), _msg("two", timestamp=2)]
    await backend.store.append(KEY, old)
    with backend.failing_writes(), pytest.raises(StorageError):
        await backend.store.replace(KEY, [_msg(PAD, "system")], archive=[_msg(PAD, timestamp=0)])
    store = backend.reopen()
    assert await store.load(KEY) == old and await store.read_archive(KEY) == []


async def test_clear_archives_the_history_and_keeps_the_meta(backend: Backend) -> None:
    said = [_msg("hello", timestamp=1)]
    await backend.store.append(KEY, said)
    await backend.store.write_meta(KEY, SessionMeta(chat_id=KEY.chat_id, title="kept"), durable=True)
    await backend.store.clear(KEY, archive=said)
    store = backend.reopen()
    assert await store.load(KEY) == [] and await store.read_archive(KEY) == said
    meta = await store.read_meta(KEY)
    assert meta is not None and meta.title == "kept" and await store.exists(KEY)
    assert [a.key for a in await store.activity("default")] == []  # no history: nothing to compact


async def test_rewrite_archive_replaces_it_whole(backend: Backend) -> None:
    await backend.store.append(KEY, [_msg("a", timestamp=1)])
    await backend.store.replace(KEY, [], archive=[_msg("secret", timestamp=0), _msg("kept", timestamp=1)])
    await backend.store.rewrite_archive(KEY, [_msg("kept", timestamp=1)])
    assert await backend.reopen().read_archive(KEY) == [_msg("kept", timestamp=1)]


async def test_delete_removes_everything_and_can_be_repeated(backend: Backend) -> None:
    await backend.store.append(KEY, [_msg("a", timestamp=1)])
    await backend.store.replace(KEY, [_msg("b", timestamp=2)], archive=[_msg("a", timestamp=1)])
    await backend.store.write_meta(KEY, SessionMeta(chat_id=KEY.chat_id, title="t"), durable=True)
    await backend.store.append(OTHER, [_msg("stays", timestamp=3)])
    assert await backend.store.delete(KEY) is True
    store = backend.reopen()
    assert await store.load(KEY) == [] and await store.read_archive(KEY) == []
    assert await store.read_meta(KEY) is None and not await store.exists(KEY)
    assert await store.list_keys("default") == [OTHER]
    assert await store.delete(KEY) is False
    assert await store.load(OTHER) == [_msg("stays", timestamp=3)]


async def test_keys_with_anything_also_finds_an_archive_left_without_a_history(backend: Backend) -> None:
    """What "forget me" goes through: every session with a history, a meta or only an archive, of that agent."""
    archived_only = session_key("default", "http", "chat-archived")
    await backend.store.append(KEY, [_msg("a", timestamp=1)])
    await backend.store.write_meta(OTHER, SessionMeta(chat_id=OTHER.chat_id, title="t"), durable=True)
    await backend.store.rewrite_archive(archived_only, [_msg("old", timestamp=0)])
    await backend.store.append(session_key("other-agent", "http", "chat-1"), [_msg("b", timestamp=2)])
    store = backend.reopen()
    assert archived_only not in await store.list_keys("default")
    assert sorted(map(str, await store.keys_with_anything("default"))) == sorted(map(str, [KEY, OTHER, archived_only]))
    assert await store.delete(archived_only) is True
    assert archived_only not in await store.keys_with_anything("default")


async def test_meta_round_trip_durable_or_not(backend: Backend) -> None:
    meta = SessionMeta(
        chat_id=KEY.chat_id, title="标题", created_at=1, updated_at=2, pinned=True, last_usage={"input_tokens": 9}
    )
    await backend.store.write_meta(KEY, meta, durable=True)
    assert await backend.reopen().read_meta(KEY) == meta
    later = meta.with_changes(last_usage={"input_tokens": 10}, updated_at=3)
    await backend.store.write_meta(KEY, later, durable=False)
    assert await backend.store.read_meta(KEY) == later


async def test_a_meta_whose_title_holds_a_lone_surrogate_or_a_nul_round_trips(backend: Backend) -> None:
    """A title is a user's first words: a lone surrogate (JSON input may hold one) or a NUL in it is stored as it
    was, durable or written behind, instead of failing the write (on PostgreSQL, every write batched with it)."""
    meta = SessionMeta(chat_id=KEY.chat_id, title="lone \ud800 nul \x00 sep \u2028 😀", created_at=1, updated_at=2)
    await backend.store.write_meta(KEY, meta, durable=True)
    assert await backend.reopen().read_meta(KEY) == meta
    later = meta.with_changes(title="\udfff", updated_at=3)
    await backend.store.write_meta(KEY, later, durable=False)
    assert await backend.store.read_meta(KEY) == later


async def test_a_meta_behind_its_history_is_caught_up_from_the_newest_record(backend: Backend) -> None:
    meta = SessionMeta(chat_id=KEY.chat_id, title="t", created_at=1000, updated_at=1000)
    await backend.store.write_meta(KEY, meta, durable=True)
    await backend.store.append(KEY, [_msg("a", timestamp=2000), _msg("b", "assistant", timestamp=5000)])
    # the meta written behind was lost in a crash: the history says when the session last changed
    assert await backend.reopen().read_meta(KEY) == meta.with_changes(updated_at=5000)
    await backend.store.write_meta(KEY, meta.with_changes(updated_at=9000), durable=False)
    assert (await backend.reopen().read_meta(KEY)) == meta.with_changes(updated_at=9000)  # never moved back


async def test_exists_list_keys_and_activity(backend: Backend) -> None:
    store = backend.store
    third = session_key("default", "cli", "c")
    elsewhere = session_key("other", "http", "x")
    await store.append(KEY, [_msg("a", timestamp=1)])
    await store.write_meta(OTHER, SessionMeta(chat_id=OTHER.chat_id), durable=True)  # a meta, no history yet
    await store.append(elsewhere, [_msg("not default's", timestamp=1)])
    assert await store.exists(KEY) and await store.exists(OTHER) and not await store.exists(third)
    assert sorted(map(str, await store.list_keys("default"))) == sorted([str(KEY), str(OTHER)])
    order: list[SessionKey] = []
    for key in (third, OTHER, KEY):
        await asyncio.sleep(0.05)  # file times are a few milliseconds coarse: the order must not be a tie
        await store.append(key, [_msg(f"to {key.chat_id}", timestamp=2)])
        order.insert(0, key)
    activity = await backend.reopen().activity("default")
    assert [a.key for a in activity] == order
    assert activity[0].changed_at >= activity[1].changed_at >= activity[2].changed_at
    assert [a.key for a in await store.activity("other")] == [elsewhere]


async def test_32_appends_on_different_keys_at_the_same_moment(backend: Backend) -> None:
    keys = [session_key("default", "http", f"chat-{i}") for i in range(32)]
    for key in keys:
        await backend.store.append(key, [_msg("first", timestamp=1)])
    start = asyncio.Event()

    async def writer(i: int) -> None:
        await start.wait()
        await backend.store.append(keys[i], [_msg(f"{i}-a", timestamp=2), _msg(f"{i}-b", "assistant", timestamp=3)])

    tasks = [asyncio.create_task(writer(i)) for i in range(32)]
    await asyncio.sleep(0)
    start.set()  # every writer is waiting: released together
    await asyncio.gather(*tasks)
    store = backend.reopen()
    for i, key in enumerate(keys):
        contents = [m["content"] for m in await store.load(key)]
        assert contents == ["first", f"{i}-a", f"{i}-b"]


async def test_a_store_that_fenced_a_session_writes_it_as_before_and_fencing_again_reports_no_change(
    backend: Backend,
) -> None:
    """A lease holder fences the session with its token; its own writes land; fencing again with its next token
    (nobody else wrote) says the history was not changed by someone else, so no reload is needed."""
    store = backend.store
    await store.fence(KEY, 1)
    await store.append(KEY, [_msg("a", timestamp=1)])
    await store.replace(KEY, [_msg("b", timestamp=2)], archive=[_msg("a", timestamp=1)])
    await store.write_meta(KEY, SessionMeta(chat_id=KEY.chat_id, title="t"), durable=False)
    assert await store.fence(KEY, 2) is False
    await store.append(KEY, [_msg("c", timestamp=3)])
    await store.rewrite_archive(KEY, [])
    await store.clear(KEY, archive=[_msg("b", timestamp=2), _msg("c", timestamp=3)])
    assert await store.fence(KEY, 3) is False
    assert await store.fence(KEY, None) is False  # released: writes carry no token any more
    await store.append(KEY, [_msg("d", timestamp=4)])
    assert [m["content"] for m in await backend.reopen().load(KEY)] == ["d"]
    assert await store.delete(KEY) is True


async def test_files_a_torn_tail_is_skipped_and_cut_by_the_next_append(tmp_path: Path) -> None:
    """The files' crash semantics (a write in memory or a database cannot tear): half a line is skipped, then cut."""
    store = FileSessionStore(tmp_path, fsync=True)
    await store.append(KEY, [_msg("whole", timestamp=1)])
    line = json.dumps(_msg("被截断的消息", "assistant", timestamp=2), ensure_ascii=False).encode()
    with store.layout(KEY.agent).history_file(KEY).open("ab") as f:
        f.write(line[: len(line) // 2])  # a power cut mid-append, inside a UTF-8 character
    restarted = FileSessionStore(tmp_path, fsync=True)
    assert await restarted.load(KEY) == [_msg("whole", timestamp=1)]
    await restarted.append(KEY, [_msg("next", timestamp=3)])
    assert await FileSessionStore(tmp_path).load(KEY) == [_msg("whole", timestamp=1), _msg("next", timestamp=3)]


async def test_files_killed_mid_append_keep_a_prefix(tmp_path: Path) -> None:
    """The files' crash semantics through the store: a writer SIGKILLed while appending leaves whole records."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(WRITER),
        str(tmp_path),
        "nofsync",
        stdout=asyncio.subprocess.PIPE,
        cwd=REPO,
    )
    assert child.stdout is not None
    assert await asyncio.wait_for(child.stdout.readline(), timeout=20) == b"ready\n"
    await asyncio.sleep(0.02)  # let it append for a while, then kill it mid-write
    child.send_signal(signal.SIGKILL)
    assert await asyncio.wait_for(child.wait(), timeout=10) == -signal.SIGKILL
    store: SessionStore = FileSessionStore(tmp_path)
    key = session_key("default", "cli", "crash")
    records = await store.load(key)
    assert [r["seq"] for r in records] == list(range(len(records))) and records
    for r in records:
        content = r["content"]
        assert (content if isinstance(content, str) else content[0]["text"]) == text_for(r["seq"])
    meta = await store.read_meta(key)
    assert meta is not None and meta.updated_at == records[-1]["timestamp"]  # caught up from the history


async def test_files_a_replace_refused_after_its_archive_landed_takes_the_archive_back(tmp_path: Path) -> None:
    """The disk fills between a replace's two steps (a compaction's archive landed, its new history does not):
    the archive is taken back too, so nothing of the compaction is half applied and its retry archives once."""
    with small_tmpfs(tmp_path / "data", size="1m") as disk:
        store = FileSessionStore(disk, fsync=True)
        old = [_msg("one", timestamp=1), _msg("two", timestamp=2)]
        await store.append(KEY, old)
        await store.replace(KEY, old, archive=[_msg("seed", timestamp=0)])  # the archive file has a page now
        filler = fill(disk)
        with pytest.raises(StorageError):  # the archive line fits its last page; the new history file does not
            await store.replace(KEY, [_msg(PAD, "system", timestamp=3)], archive=old[:1])
        assert await store.load(KEY) == old
        assert await store.read_archive(KEY) == [_msg("seed", timestamp=0)]
        filler.unlink()
        await store.replace(KEY, [_msg(PAD, "system", timestamp=3)], archive=old[:1])  # the compaction's retry
        assert await store.read_archive(KEY) == [_msg("seed", timestamp=0), old[0]]  # archived once
        assert await store.load(KEY) == [_msg(PAD, "system", timestamp=3)]
