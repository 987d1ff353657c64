"""SessionHistory: persistence across restarts, meta rules, clear, replace with archive, concurrency."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest

from agenthub.clock import ManualClock
from agenthub.config import Settings
from agenthub.errors import PathRefusedError
from agenthub.hosting.app import build_gateway
from agenthub.session.history import SessionHistory
from agenthub.session_keys import SessionKey, session_key
from agenthub.storage import jsonl
from agenthub.storage.in_ram import InMemorySessionStore
from agenthub.storage.meta import DEFAULT_TITLE, SessionMeta, read_meta, write_meta
from agenthub.storage.postgres.database import open_database
from agenthub.storage.postgres.sessions import PostgresSessionStore

KEY = session_key("reviewer", "http", "chat-1")


def _history(tmp_path: Path, clock: ManualClock | None = None) -> SessionHistory:
    return SessionHistory(tmp_path / "data", fsync=False, clock=clock or ManualClock())


def _user(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


async def test_history_survives_a_restart(tmp_path: Path) -> None:
    clock = ManualClock(1000.0)
    first = _history(tmp_path, clock)
    await first.append(KEY, _user("hello"))
    await first.append(KEY, {"role": "assistant", "content": [{"type": "text", "text": "hi"}]})
    again = _history(tmp_path, clock)  # a new process: nothing cached
    loaded = await again.load(KEY)
    assert [m["role"] for m in loaded] == ["user", "assistant"]
    assert loaded[0] == {"role": "user", "content": "hello", "timestamp": 1_000_000}
    assert (tmp_path / "data/reviewer/sessions/reviewer_http_chat-1.jsonl").is_file()


async def test_peek_reads_the_history_and_its_meta_and_writes_nothing(tmp_path: Path) -> None:
    history = _history(tmp_path)
    assert await history.peek(KEY) == ([], None)  # no session: no meta asked for, none made
    assert not history.exists(KEY)
    await history.append(KEY, _user("a"), meta_changes={"last_usage": {"input_tokens": 7}})
    messages, meta = await history.peek(KEY)
    assert [m["content"] for m in messages] == ["a"]
    assert meta is not None and meta.last_usage == {"input_tokens": 7}
    again = _history(tmp_path)  # nothing cached: read from the store
    (tmp_path / "data/reviewer/sessions/reviewer_http_chat-1.meta.json").unlink()  # a legacy session: no meta
    messages, meta = await again.peek(KEY)
    assert len(messages) == 1 and meta is None
    assert not (tmp_path / "data/reviewer/sessions/reviewer_http_chat-1.meta.json").exists()  # none synthesised


async def test_peek_now_answers_as_peek_from_the_cache_and_nothing_it_does_not_hold(tmp_path: Path) -> None:
    history = _history(tmp_path)
    assert history.peek_now(KEY) is None  # nothing cached: `peek` reads the store
    assert await history.peek(KEY) == ([], None)
    assert history.peek_now(KEY) == ([], None)  # an empty history: no meta asked for
    await history.append(KEY, _user("a"), meta_changes={"last_usage": {"input_tokens": 7}})
    now = history.peek_now(KEY)
    assert now is not None and now == await history.peek(KEY)
    assert now[0] is (await history.peek(KEY))[0]  # the cache's own list, as `peek`'s
    again = _history(tmp_path)
    await again.count(KEY)  # the history loaded, its meta not yet
    assert again.peek_now(KEY) is None
    assert again.peek_now(KEY) is None and (await again.peek(KEY))[1] is not None
    assert again.peek_now(KEY) == await again.peek(KEY)


async def test_peek_now_never_answers_while_a_write_of_the_session_is_under_way(tmp_path: Path) -> None:
    """An append in flight holds the session's lock until the store has it and the cache follows: meanwhile
    `peek_now` says None (then `peek` waits for the append), so no answer is ever a write half done: before it, the
    history and meta as they were; after it, both as it left them."""
    history = _history(tmp_path)
    await history.append(KEY, _user("a"))

    def state() -> tuple[list[str], dict[str, int] | None] | None:
        seen = history.peek_now(KEY)
        return None if seen is None else ([m["content"] for m in seen[0]], seen[1].last_usage if seen[1] else None)

    writing = asyncio.create_task(history.append(KEY, _user("b"), meta_changes={"last_usage": {"input_tokens": 9}}))
    seen = []
    while not writing.done():  # every step of the loop while the append runs (its task, the store's write)
        seen.append(state())
        await asyncio.sleep(0)
    seen.append(state())
    assert None in seen  # the lock taken: no answer until it is let go
    first, last = seen.index(None), len(seen) - seen[::-1].index(None)
    assert set(map(repr, seen[:first])) <= {repr((["a"], None))}
    assert all(s is None for s in seen[first:last])
    assert seen[last:] and set(map(repr, seen[last:])) == {repr((["a", "b"], {"input_tokens": 9}))}
    assert history.peek_now(KEY) == await history.peek(KEY)


async def test_peek_now_of_a_shared_store_answers_only_while_the_lease_is_held(postgres_dsn: str) -> None:
    """PostgreSQL: another instance may write a session this one does not hold, so its cache is no answer then."""
    store = PostgresSessionStore(await open_database(postgres_dsn))
    key = SessionKey("default", "http", "peeked-now")
    try:
        history = SessionHistory(store=store)
        history.lease_held(key, True)
        await store.fence(key, 1)
        await history.append(key, _user("a"))
        assert history.peek_now(key) == await history.peek(key)
        history.lease_held(key, False)
        assert history.peek_now(key) is None
        assert [m["content"] for m in (await history.peek(key))[0]] == ["a"]
    finally:
        await store.close()


async def test_load_returns_a_copy(tmp_path: Path) -> None:
    history = _history(tmp_path)
    await history.append(KEY, _user("a"))
    (await history.load(KEY)).clear()
    assert await history.count(KEY) == 1


async def test_meta_title_and_updated_at(tmp_path: Path) -> None:
    clock = ManualClock(100.0)
    history = _history(tmp_path, clock)
    await history.append(KEY, {"role": "assistant", "content": "welcome"})
    assert (await history.get_meta(KEY)).title == DEFAULT_TITLE  # type: ignore[union-attr]
    clock.advance(5)
    long_text = "[channel: wecom] [from: zhangsan]  " + "请帮我审查这段代码" * 10
    await history.append(KEY, _user(long_text))
    meta = await history.get_meta(KEY)
    assert meta is not None
    assert meta.title == ("请帮我审查这段代码" * 10)[:40]
    assert (meta.created_at, meta.updated_at) == (100_000, 105_000)
    clock.advance(5)
    await history.append(KEY, _user("a later message does not retitle"))
    await history.flush()  # a moved updated_at is written behind
    on_disk = read_meta(history.layout("reviewer").meta_file(KEY))
    assert on_disk is not None and on_disk.title == meta.title and on_disk.updated_at == 110_000


async def test_append_does_not_reread_the_meta_file(tmp_path: Path) -> None:
    clock = ManualClock(100.0)
    history = _history(tmp_path, clock)
    await history.append(KEY, _user("first"))
    meta_path = history.layout("reviewer").meta_file(KEY)
    meta = read_meta(meta_path)
    assert meta is not None
    write_meta(meta_path, meta.with_changes(title="changed behind its back"))
    clock.advance(1)
    await history.append(KEY, _user("second"))
    await history.flush()
    after = read_meta(meta_path)
    assert after is not None and after.title == "first" and after.updated_at == 101_000  # from the cache


async def test_clear_keeps_the_meta(tmp_path: Path) -> None:
    history = _history(tmp_path)
    await history.append(KEY, _user("keep my title"))
    await history.update_meta(KEY, pinned=True)
    await history.clear(KEY)
    assert await history.load(KEY) == []
    assert not history.layout("reviewer").history_file(KEY).exists()
    restarted = _history(tmp_path)
    meta = await restarted.get_meta(KEY)
    assert meta is not None and meta.title == "keep my title" and meta.pinned
    assert await restarted.load(KEY) == []


async def test_clear_archives_the_history_before_deleting_it(tmp_path: Path) -> None:
    history = _history(tmp_path)
    earlier = [_user("compacted earlier", timestamp=1)]
    await history.append(KEY, *earlier)
    await history.replace(KEY, [])  # an earlier compaction already archived this one
    said = [_user("delete all my files", timestamp=2), {"role": "assistant", "content": "done", "timestamp": 3}]
    await history.append(KEY, *said)
    assert await history.clear(KEY) == said
    assert not history.layout("reviewer").history_file(KEY).exists()
    restarted = _history(tmp_path)
    assert await restarted.load(KEY) == []
    assert await restarted.archived(KEY) == earlier + said  # appended after what was archived before
    assert await restarted.clear(KEY) == [] and await restarted.archived(KEY) == earlier + said


async def test_replace_archives_what_it_removes(tmp_path: Path) -> None:
    history = _history(tmp_path)
    messages = [_user(f"m{i}", timestamp=i) for i in range(6)]
    await history.append(KEY, *messages)
    summary = {"role": "system", "content": "[历史摘要] m0-m3", "timestamp": 10}
    removed = await history.replace(KEY, [summary, *messages[4:]])
    assert removed == messages[:4]
    restarted = _history(tmp_path)
    assert await restarted.load(KEY) == [summary, *messages[4:]]
    assert await restarted.archived(KEY) == messages[:4]
    assert history.layout("reviewer").archive_file(KEY).parent.name == "archive"


async def test_archive_plus_history_always_hold_every_message(tmp_path: Path) -> None:
    rng = random.Random(7)
    history = _history(tmp_path)
    appended: list[dict[str, Any]] = []
    for step in range(60):
        if step % 9 == 8:
            current = await history.load(KEY)
            keep = current[rng.randrange(len(current) + 1) :]
            if rng.random() < 0.5:
                keep = [{"role": "system", "content": f"[历史摘要] {step}", "timestamp": step}, *keep]
            await history.replace(KEY, keep)
        else:
            batch = [_user(f"m{step}-{j}", timestamp=step) for j in range(rng.randint(1, 3))]
            batch += [_user(f"m{step}-0", timestamp=step)] if rng.random() < 0.2 else []  # exact duplicates too
            await history.append(KEY, *batch)
            appended += batch
    restarted = _history(tmp_path)
    everything = await restarted.archived(KEY) + await restarted.load(KEY)
    dumped = [json.dumps(m, sort_keys=True) for m in everything]
    for message in appended:
        dumped.remove(json.dumps(message, sort_keys=True))  # raises if any appended message was lost


async def test_legacy_session_gets_meta_on_first_listing(tmp_path: Path) -> None:
    history = _history(tmp_path, ManualClock(9_999.0))
    legacy = session_key("reviewer", "http", "old")
    path = history.layout("reviewer").history_file(legacy)
    jsonl.append_records(
        path,
        [
            {"role": "assistant", "content": "hello", "timestamp": 1_000},
            {"role": "user", "content": [{"type": "text", "text": "[channel: http] 旧会话的问题"}], "timestamp": 2_000},
            {"role": "assistant", "content": "answer", "timestamp": 3_000},
        ],
    )
    await history.create(KEY, title="new one")
    listed = dict(await history.list_sessions("reviewer", channel="http"))
    assert set(listed) == {legacy, KEY}
    meta = listed[legacy]
    assert (meta.title, meta.created_at, meta.updated_at, meta.chat_id) == ("旧会话的问题", 1_000, 3_000, "old")
    assert read_meta(history.layout("reviewer").meta_file(legacy)) == meta  # saved
    assert await history.list_sessions("reviewer", channel="wecom") == []


async def test_delete_removes_history_and_meta(tmp_path: Path) -> None:
    history = _history(tmp_path)
    await history.append(KEY, _user("x"))
    assert await history.delete(KEY) is True
    assert not history.exists(KEY)
    assert await history.get_meta(KEY) is None
    assert await history.delete(KEY) is False


async def test_delete_removes_the_archive_and_the_files_it_is_given(tmp_path: Path) -> None:
    history = _history(tmp_path)
    await history.append(KEY, _user("compacted away"), _user("said after"))
    await history.replace(KEY, [_user("said after")])  # the first one now lives only in the archive
    other = session_key("reviewer", "http", "chat-2")
    await history.append(other, _user("another chat"))
    await history.replace(other, [])
    own_memory = tmp_path / "data/reviewer/memory/chats/x.md"
    own_memory.parent.mkdir(parents=True)
    own_memory.write_text("facts from this chat")
    assert await history.delete(KEY, also=[own_memory, own_memory.with_name("x.md.bak")]) is True
    sessions = tmp_path / "data/reviewer/sessions"
    assert not any(KEY.file_stem in p.name for p in sessions.rglob("*"))
    assert not own_memory.exists()
    assert await _history(tmp_path).archived(KEY) == []
    assert [m["content"] for m in await history.archived(other)] == ["another chat"]  # other chats untouched


async def test_evict_never_splits_a_sessions_lock(tmp_path: Path) -> None:
    history = _history(tmp_path)
    await history.append(KEY, _user("0"))
    tasks = [asyncio.create_task(history.append(KEY, _user(str(i)))) for i in range(1, 30)]
    for _ in range(30):
        history.evict(KEY)  # while appends hold or wait for the lock: must not drop it
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    history.evict(KEY)
    assert [m["content"] for m in await history.load(KEY)] == [str(i) for i in range(30)]


async def test_200_sessions_appended_concurrently(tmp_path: Path) -> None:
    history = SessionHistory(tmp_path / "data", fsync=False)
    keys = [session_key(f"agent{i % 4}", "http", f"chat:{i}") for i in range(200)]
    per_key = 5

    async def writer(worker: int) -> None:
        for step in range(per_key):
            for key in keys[worker::20]:  # 20 tasks, each interleaving its 10 sessions
                await history.append(key, _user(f"{key}#{step}"))

    await asyncio.gather(*(writer(w) for w in range(20)))
    restarted = SessionHistory(tmp_path / "data", fsync=False)
    for key in keys:
        contents = [m["content"] for m in await restarted.load(key)]
        assert contents == [f"{key}#{step}" for step in range(per_key)]


async def test_unknown_ids_do_not_grow_the_cache(tmp_path: Path) -> None:
    history = _history(tmp_path)
    for i in range(50):
        assert await history.get_meta(SessionKey("reviewer", "http", f"probe{i}")) is None
    assert history._entries == {}


async def test_a_link_planted_at_the_meta_file_refuses_the_append_whole(tmp_path: Path) -> None:
    history = _history(tmp_path)
    await history.append(KEY, _user("first"))
    meta = tmp_path / "data/reviewer/sessions/reviewer_http_chat-1.meta.json"
    meta.unlink()
    meta.symlink_to(tmp_path / "elsewhere.json")
    for _ in range(2):  # the user retries: nothing is duplicated
        try:
            await history.append(KEY, _user("second"))
            raise AssertionError("the append must be refused")
        except PathRefusedError:
            pass
    on_disk = jsonl.read_records(tmp_path / "data/reviewer/sessions/reviewer_http_chat-1.jsonl")
    assert [m["content"] for m in on_disk] == [m["content"] for m in await history.load(KEY)] == ["first"]
    assert not (tmp_path / "elsewhere.json").exists()


async def test_an_append_to_a_known_session_leaves_the_meta_file_alone_until_a_flush(tmp_path: Path) -> None:
    clock = ManualClock(100.0)
    history = _history(tmp_path, clock)
    await history.append(KEY, _user("first"))  # a new session: its meta (the title) is written at once
    meta_path = history.layout("reviewer").meta_file(KEY)
    written, inode = meta_path.read_bytes(), meta_path.stat().st_ino
    for _ in range(3):
        clock.advance(1)
        await history.append(KEY, {"role": "assistant", "content": "reply"}, meta_changes={"last_usage": {"i": 1}})
    assert (meta_path.read_bytes(), meta_path.stat().st_ino) == (written, inode)  # no rewrite per append
    await history.aclose()
    on_disk = read_meta(meta_path)
    assert on_disk is not None and on_disk.updated_at == 103_000 and on_disk.last_usage == {"i": 1}


async def test_a_meta_written_behind_and_lost_in_a_crash_is_caught_up_from_the_history(tmp_path: Path) -> None:
    clock = ManualClock(100.0)
    history = _history(tmp_path, clock)
    await history.append(KEY, _user("first"))
    clock.advance(60)
    await history.append(KEY, {"role": "assistant", "content": "later"})  # then the process dies: no flush
    restarted = _history(tmp_path, clock)
    meta = await restarted.get_meta(KEY)
    assert meta is not None and (meta.title, meta.created_at, meta.updated_at) == ("first", 100_000, 160_000)
    listed = dict(await _history(tmp_path, clock).list_sessions("reviewer"))
    assert listed[KEY].updated_at == 160_000


async def test_the_meta_is_written_behind_after_the_delay(tmp_path: Path) -> None:
    clock = ManualClock(100.0)
    history = SessionHistory(tmp_path / "data", fsync=False, clock=clock, meta_delay_s=0.01)
    await history.append(KEY, _user("first"))
    clock.advance(1)
    await history.update_meta(KEY, last_usage={"input_tokens": 5})
    meta_path = history.layout("reviewer").meta_file(KEY)
    for _ in range(400):  # the flush runs on the loop after the delay; wait for it, bounded
        on_disk = read_meta(meta_path)
        if on_disk is not None and on_disk.last_usage:
            break
        await asyncio.sleep(0.025)
    assert on_disk is not None and on_disk.last_usage == {"input_tokens": 5}


async def test_title_and_pin_are_written_at_once(tmp_path: Path) -> None:
    history = _history(tmp_path)
    await history.append(KEY, _user("first"))
    await history.update_meta(KEY, title="renamed", pinned=True)
    on_disk = read_meta(history.layout("reviewer").meta_file(KEY))
    assert on_disk is not None and (on_disk.title, on_disk.pinned) == ("renamed", True)


async def test_evicting_a_session_writes_its_meta_behind_then_drops_it(tmp_path: Path) -> None:
    clock = ManualClock(100.0)
    history = _history(tmp_path, clock)
    await history.append(KEY, _user("first"))
    clock.advance(2)
    await history.append(KEY, {"role": "assistant", "content": "reply"})
    history.evict(KEY)
    assert KEY in history._entries  # not before its meta is written
    for _ in range(400):
        if KEY not in history._entries:
            break
        await asyncio.sleep(0.025)
    assert KEY not in history._entries
    on_disk = read_meta(history.layout("reviewer").meta_file(KEY))
    assert on_disk is not None and on_disk.updated_at == 102_000


async def test_a_delete_is_not_undone_by_a_meta_written_behind(tmp_path: Path) -> None:
    clock = ManualClock(100.0)
    history = _history(tmp_path, clock)
    await history.append(KEY, _user("first"))
    clock.advance(1)
    await history.append(KEY, {"role": "assistant", "content": "reply"})  # a meta waiting to be written
    assert await history.delete(KEY)
    await history.aclose()
    assert not history.exists(KEY) and not history.layout("reviewer").meta_file(KEY).exists()


async def test_over_the_memory_store_the_history_keeps_its_rules(tmp_path: Path) -> None:
    clock = ManualClock(100.0)
    store = InMemorySessionStore()
    history = SessionHistory(store=store, clock=clock)
    await history.append(KEY, _user("[channel: http] 你好"))
    await history.replace(KEY, [_user("kept", timestamp=5)])
    meta = await SessionHistory(store=store, clock=clock).get_meta(KEY)
    assert meta is not None and meta.title == "你好" and history.exists(KEY)
    assert await store.read_archive(KEY) == [{"role": "user", "content": "[channel: http] 你好", "timestamp": 100_000}]
    with pytest.raises(TypeError):
        history.layout("reviewer")


async def test_the_gateways_shutdown_writes_the_meta_behind(settings: Settings) -> None:
    key = session_key("default", "http", "shutdown")
    async with build_gateway(settings) as gw:
        await gw.history.append(key, _user("hello"))
        await gw.history.update_meta(key, last_usage={"input_tokens": 42})
        meta_path = gw.history.layout("default").meta_file(key)
        assert (read_meta(meta_path) or SessionMeta(chat_id="")).last_usage is None  # still behind
    on_disk = read_meta(meta_path)
    assert on_disk is not None and on_disk.last_usage == {"input_tokens": 42}


async def test_a_meta_that_could_not_be_written_behind_is_retried_without_another_write() -> None:
    store = InMemorySessionStore()
    history = SessionHistory(store=store, meta_delay_s=0.01)
    await history.append(KEY, _user("first"))
    await history.update_meta(KEY, last_usage={"input_tokens": 7})  # a statistic: written behind
    store.fail_writes = True
    await asyncio.sleep(0.1)  # the write behind runs now, and fails
    store.fail_writes = False
    stored = await store.read_meta(KEY)
    for _ in range(300):  # no append, no shutdown: only a retry can write it
        if stored is not None and stored.last_usage == {"input_tokens": 7}:
            break
        await asyncio.sleep(0.01)
        stored = await store.read_meta(KEY)
    assert stored is not None and stored.last_usage == {"input_tokens": 7}


async def test_probing_and_deleting_sessions_leaves_no_lock_behind(tmp_path: Path) -> None:
    history = _history(tmp_path)
    for n in range(50):
        assert await history.get_meta(session_key("reviewer", "http", f"nobody-{n}")) is None
    await history.append(KEY, _user("x"))
    await history.delete(KEY)
    assert history._locks == {} and history._users == {}  # a probe or a deleted session costs nothing later
