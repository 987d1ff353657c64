"""A full disk under data/: an append lands in the file and the cache together or in neither; listing keeps working.

The full disk is real: a 256 KiB tmpfs mounted over the test's `data/` (the tests run as root, and mount(8) works
here), filled page by page with `os.write` until the kernel answers ENOSPC and `statvfs` reports no free block.
What still fits is then exact: a file's last, partly used page takes appends up to its end, a new file (the
meta's temp file) cannot get a page. Nothing is faked; the filler is removed to "free the disk" again.
"""

from __future__ import annotations

import asyncio
import errno
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from agenthub.clock import ManualClock
from agenthub.errors import StorageError
from agenthub.session.history import SessionHistory
from agenthub.session_keys import session_key
from agenthub.storage import jsonl
from agenthub.storage.meta import read_meta
from tests.support.disks import PAGE, fill, room_in_last_page, small_tmpfs
from tests.support.fakes.anthropic import FakeAnthropic, reply_text
from tests.support.harness import RunningApi

KEY = session_key("default", "http", "full")
AGENT = "/api/agents/default"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """`tmp_path/data` as a fresh 256 KiB tmpfs (requested before `api`, so the daemon's data lives on it)."""
    with small_tmpfs(tmp_path / "data") as disk:
        yield disk


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


async def test_a_failing_meta_write_does_not_fail_an_append_that_landed(small_disk: Path) -> None:
    clock = ManualClock(1000.0)
    history = SessionHistory(small_disk, fsync=True, clock=clock)
    await history.append(KEY, _user("first"))
    clock.advance(1)
    path, meta_path = history.layout("default").history_file(KEY), history.layout("default").meta_file(KEY)
    filler = fill(small_disk)
    assert room_in_last_page(path) > 500  # the next line fits in the history's last page; a new meta page does not
    with capture_logs() as logs:
        await history.append(KEY, {"role": "assistant", "content": "second"})
        await history.flush()  # the moved updated_at is written behind
    assert [m["content"] for m in await history.load(KEY)] == ["first", "second"]
    assert [m["content"] for m in jsonl.read_records(path)] == ["first", "second"]
    assert "session_meta_write_failed" in [e["event"] for e in logs]
    on_disk = read_meta(meta_path)
    assert on_disk is not None and on_disk.title == "first"  # the old meta is intact, only its updated_at is stale
    cached = await history.get_meta(KEY)
    assert cached is not None and cached.updated_at > on_disk.updated_at  # the cache has the truth meanwhile
    filler.unlink()
    history.evict(KEY)  # a dirty meta is not dropped with the cache
    await history.update_meta(KEY, pinned=True)
    rewritten = read_meta(meta_path)
    assert rewritten is not None and rewritten.pinned and rewritten.updated_at == cached.updated_at


async def test_a_line_that_does_not_fit_lands_nowhere_and_a_retry_does_not_duplicate(small_disk: Path) -> None:
    history = SessionHistory(small_disk, fsync=True)
    await history.append(KEY, _user("first"), {"role": "assistant", "content": "ok"})
    path = history.layout("default").history_file(KEY)
    before = path.read_bytes()
    filler = fill(small_disk)
    big = _user("x" * (room_in_last_page(path) + 100))  # a short write: it would tear the line at the page end
    with pytest.raises(StorageError):
        await history.append(KEY, big)
    assert path.read_bytes() == before
    assert await history.load(KEY) == jsonl.read_records(path)
    filler.unlink()
    await history.append(KEY, big)  # the user's retry
    assert [m["role"] for m in await history.load(KEY)] == ["user", "assistant", "user"]
    assert await SessionHistory(small_disk).load(KEY) == await history.load(KEY)


async def test_listing_works_on_a_full_disk_and_legacy_meta_is_saved_later(small_disk: Path) -> None:
    history = SessionHistory(small_disk, fsync=True)
    await history.append(KEY, _user("has meta"))
    legacy = session_key("default", "http", "legacy")
    jsonl.append_records(history.layout("default").history_file(legacy), [{**_user("旧会话"), "timestamp": 5}])
    filler = fill(small_disk)
    listed = dict(await SessionHistory(small_disk).list_sessions("default", channel="http"))
    assert set(listed) == {KEY, legacy} and listed[legacy].title == "旧会话"
    assert not history.layout("default").meta_file(legacy).exists()
    filler.unlink()
    restarted = SessionHistory(small_disk)
    assert (await restarted.get_meta(legacy)) == listed[legacy]
    assert read_meta(restarted.layout("default").meta_file(legacy)) == listed[legacy]


def test_a_short_jsonl_write_is_cut_back(small_disk: Path) -> None:
    path = small_disk / "s.jsonl"
    jsonl.append_records(path, [{"n": 1}])
    fill(small_disk)
    with pytest.raises(OSError) as raised:
        jsonl.append_records(path, [{"n": 2, "pad": "y" * PAGE}])
    assert raised.value.errno == errno.ENOSPC
    assert path.read_bytes() == b'{"n": 1}\n'


async def test_over_http_the_reply_matches_the_file_on_a_full_disk(
    small_disk: Path, api: RunningApi, fake_llm: FakeAnthropic
) -> None:
    """The issue's run: a failed message must not be on disk, so neither the model nor a restart sees a ghost."""
    fake_llm.script(reply_text("one"), reply_text("two"), reply_text("three"))
    assert (await api.call("POST", AGENT + "/chat", json={"chat_id": "full", "content": "hello"}))[0] == 200
    path = api.gateway.history.layout("default").history_file(KEY)
    await api.gateway.search.stats("default")  # the search index has written what it will (its files share the disk)
    filler = fill(small_disk)
    too_big = "x" * (room_in_last_page(path) + 100)
    status, body = await api.call("POST", AGENT + "/chat", json={"chat_id": "full", "content": too_big})
    assert status == 503 and body["error"]["code"] == "storage_unavailable"
    assert "not saved" in body["error"]["message"] or "没有保存" in body["error"]["message"]
    status, body = await api.call("GET", AGENT + "/sessions")
    assert status == 200 and [m["chat_id"] for m in body["sessions"]] == ["full"]
    for method, path_, payload in (("PATCH", "/sessions/full", {"title": "t"}), ("POST", "/sessions", {})):
        status, body = await api.call(method, AGENT + path_, json=payload)
        assert status == 503 and body["error"]["code"] == "storage_unavailable", (method, status, body)
    status, body = await api.call("POST", AGENT + "/chat", json={"chat_id": "full", "content": "short"})
    assert status == 200 and body["reply"] == "two"  # it fits the last page: stored, answered, meta caught up later
    filler.unlink()
    status, body = await api.call("POST", AGENT + "/chat", json={"chat_id": "full", "content": too_big})
    assert status == 200 and body["reply"] == "three"
    status, body = await api.call("GET", AGENT + "/sessions/full/messages")
    served = body["messages"]
    assert [m["role"] for m in served] == ["user", "assistant"] * 3
    assert json.loads(json.dumps(jsonl.read_records(path))) == served
    assert [m["content"] for m in await SessionHistory(small_disk).load(KEY)] == [m["content"] for m in served]
    seen_by_model = [m["role"] for m in (fake_llm.message_requests()[-1].body or {})["messages"]]
    assert seen_by_model == ["user", "assistant", "user", "assistant", "user"]  # no ghost of the failed message


async def test_an_answer_that_cannot_be_saved_is_delivered_and_says_so(
    small_disk: Path, api: RunningApi, fake_llm: FakeAnthropic
) -> None:
    """The user's message fits the disk, the model's long answer does not: the user still gets the answer, told that
    the history will miss it; file and cache agree (the answer is in neither)."""
    assert (await api.call("POST", AGENT + "/chat", json={"chat_id": "full", "content": "hello"}))[0] == 200
    path = api.gateway.history.layout("default").history_file(KEY)
    await api.gateway.search.stats("default")  # the search index has written what it will (its files share the disk)
    fill(small_disk)
    long_answer = "y" * 300_000  # more than the whole 256 KiB disk: never fits, whatever else frees a page
    fake_llm.script(reply_text(long_answer))
    status, body = await api.call("POST", AGENT + "/chat", json={"chat_id": "full", "content": "ok"})
    assert status == 200 and body["reply"] == long_answer
    assert any("could not be saved" in n or "没能保存" in n for n in body["notices"]), body["notices"]
    stored = [m["content"] for m in jsonl.read_records(path)]
    assert long_answer not in str(stored) and [m["content"] for m in await api.gateway.history.load(KEY)] == stored


async def test_many_sessions_appending_at_once_on_a_full_disk_each_keep_file_and_cache_equal(small_disk: Path) -> None:
    history = SessionHistory(small_disk, fsync=False)
    keys = [session_key("default", "http", f"c{i}") for i in range(24)]
    for key in keys:
        await history.append(key, _user("hello"))
    fill(small_disk)
    sizes = [10 if i % 3 else PAGE for i in range(len(keys))]  # every third cannot fit its last page
    results = await asyncio.gather(
        *(history.append(key, _user("y" * size)) for key, size in zip(keys, sizes, strict=True)),
        return_exceptions=True,
    )
    assert [isinstance(r, StorageError) for r in results] == [size == PAGE for size in sizes]
    restarted = SessionHistory(small_disk)
    for key, size in zip(keys, sizes, strict=True):
        cached, on_disk = await history.load(key), await restarted.load(key)
        assert cached == on_disk and len(cached) == (1 if size == PAGE else 2)
