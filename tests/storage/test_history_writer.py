"""The history writer's group commit under cancellation: a whole-file operation whose caller is cancelled keeps the
writer's lock until it really ends, every append waiting on a batch hears how that batch really ended, and an append
made while a whole-file operation waits lands after it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agenthub.errors import StorageError
from agenthub.session_keys import SessionKey, session_key
from agenthub.storage import jsonl
from agenthub.storage.commit_log import LOG_FILE
from agenthub.storage.files import FileSessionStore
from agenthub.storage.history_writer import HistoryWriter
from agenthub.storage.inbox import FileInbox
from tests.support.gated_pool import GatedWriterThread

KEY = session_key("default", "http", "c1")
OTHER = session_key("default", "http", "c2")


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": 1}


def _contents(data: Path, key: SessionKey) -> list[str]:
    return [r["content"] for r in jsonl.read_records(data / key.agent / "sessions" / (key.file_stem + ".jsonl"))]


def _holding(writer: HistoryWriter, name: str) -> GatedWriterThread:
    """The writer's thread, holding its first operation `HistoryWriter.<name>` at its gate."""
    loop = asyncio.get_running_loop()
    held = GatedWriterThread(
        loop, lambda func, args: getattr(func, "__qualname__", "").endswith(f"HistoryWriter.{name}")
    )
    writer.thread = held
    return held


def _shutdown_cancels_the_other_tasks(appends: list[asyncio.Task[None]]) -> None:
    """What a shutdown does to the loop's tasks, the appends' own callers left alone (they hear the batch)."""
    for task in asyncio.all_tasks():
        if task is not asyncio.current_task() and task not in appends:
            task.cancel()


async def test_a_cancelled_replace_keeps_the_lock_until_it_ends_so_no_append_lands_in_the_old_file(
    tmp_path: Path,
) -> None:
    store = FileSessionStore(tmp_path, fsync=True)
    await store.append(KEY, [_user("old")])
    pool = _holding(store.writer, "_exclusive")
    replace = asyncio.create_task(store.replace(KEY, [_user("new")], archive=[]))
    await asyncio.wait_for(pool.started.wait(), 2)
    replace.cancel()
    append = asyncio.create_task(store.append(KEY, [_user("after")]))
    await asyncio.wait([append], timeout=0.3)  # an append let in before the replace ended lands meanwhile
    pool.gate.set()
    await append  # acknowledged: its line must be in the history
    with pytest.raises(asyncio.CancelledError):
        await replace
    await asyncio.to_thread(pool.finished.wait, 5)  # the replace ended (before the fix: perhaps only now)
    assert _contents(tmp_path, KEY) == ["new", "after"]
    await store.aclose()


async def test_appends_riding_a_batch_while_the_loops_tasks_are_cancelled_hear_that_it_landed(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, fsync=True)
    await store.append(KEY, [_user("first")])
    pool = _holding(store.writer, "_commit")
    appends = [asyncio.create_task(store.append(k, [_user("second")])) for k in (KEY, OTHER)]
    await asyncio.wait_for(pool.started.wait(), 2)
    _shutdown_cancels_the_other_tasks(appends)  # while the batch is in its thread
    await asyncio.sleep(0.05)
    pool.gate.set()
    await asyncio.gather(*appends)  # landed: each append is told so
    assert _contents(tmp_path, KEY) == ["first", "second"]
    assert _contents(tmp_path, OTHER) == ["second"]
    await store.aclose()


async def test_appends_riding_a_batch_while_the_loops_tasks_are_cancelled_hear_that_its_log_write_failed(
    tmp_path: Path,
) -> None:
    store = FileSessionStore(tmp_path, fsync=True)
    await store.append(KEY, [_user("kept")])
    await store.aclose()
    (tmp_path / LOG_FILE).unlink()
    (tmp_path / LOG_FILE).symlink_to(tmp_path / "elsewhere.log")  # the batch's log write is refused
    pool = _holding(store.writer, "_commit")
    appends = [asyncio.create_task(store.append(k, [_user("refused")])) for k in (KEY, OTHER)]
    await asyncio.wait_for(pool.started.wait(), 2)
    _shutdown_cancels_the_other_tasks(appends)
    await asyncio.sleep(0.05)
    pool.gate.set()
    for append in appends:
        with pytest.raises(StorageError):
            await append
    assert _contents(tmp_path, KEY) == ["kept"]
    assert _contents(tmp_path, OTHER) == []
    await store.aclose()


async def test_an_append_made_while_a_replace_waits_for_the_batch_in_flight_lands_after_the_replace(
    tmp_path: Path,
) -> None:
    store = FileSessionStore(tmp_path, fsync=True)
    await store.append(KEY, [_user("old")])
    pool = _holding(store.writer, "_commit")
    first = asyncio.create_task(store.append(KEY, [_user("first")]))
    await asyncio.wait_for(pool.started.wait(), 2)  # the batch of "first" is in the thread
    replace = asyncio.create_task(store.replace(KEY, [_user("new")], archive=[]))
    await asyncio.sleep(0.05)  # the replace waits for that batch to be told
    after = asyncio.create_task(store.append(KEY, [_user("after")]))
    await asyncio.sleep(0.05)
    pool.gate.set()
    await asyncio.gather(first, replace, after)
    assert _contents(tmp_path, KEY) == ["new", "after"]  # "after" acknowledged: never replaced away
    await store.aclose()


async def test_appends_made_while_a_batch_is_written_are_one_next_batch(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, fsync=True)
    await store.append(KEY, [_user("first")])
    pool = _holding(store.writer, "_commit")
    held = asyncio.create_task(store.append(KEY, [_user("held")]))
    await asyncio.wait_for(pool.started.wait(), 2)
    before = store.writer.batches
    queued = [asyncio.create_task(store.append(k, [_user(f"queued {k.chat_id}")])) for k in (KEY, OTHER)]
    await asyncio.sleep(0.05)
    pool.gate.set()
    await asyncio.gather(held, *queued)
    assert store.writer.batches - before <= 1  # taken by the thread together (or already by the held batch)
    assert _contents(tmp_path, KEY) == ["first", "held", "queued c1"]
    assert _contents(tmp_path, OTHER) == ["queued c2"]
    await store.aclose()


async def test_a_compaction_in_a_cancelled_accept_loses_no_message_accepted_meanwhile(tmp_path: Path) -> None:
    """An accept that triggers the journal's compaction is cancelled while the rewrite is in its thread; a message
    accepted meanwhile (acknowledged: its record landed) must still be in the journal after the rewrite."""
    store = FileSessionStore(tmp_path, fsync=True)
    inbox = FileInbox(tmp_path, writer=store.writer)
    for n in range(2):
        await inbox.settle((await inbox.accept("http", {"content": f"answered {n}"})).id)
    await store.aclose()
    store = FileSessionStore(tmp_path, fsync=True)
    inbox = FileInbox(tmp_path, writer=store.writer, compact_slack=0)  # 4 records, none live: the next accept compacts
    pool = _holding(store.writer, "_exclusive")
    compacting = asyncio.create_task(inbox.accept("http", {"content": "compacting"}))
    await asyncio.wait_for(pool.started.wait(), 2)
    compacting.cancel()
    meanwhile = asyncio.create_task(inbox.accept("http", {"content": "meanwhile"}))
    await asyncio.wait([meanwhile], timeout=0.3)
    pool.gate.set()
    accepted = await meanwhile
    await asyncio.wait([compacting])
    await asyncio.to_thread(pool.finished.wait, 5)  # the rewrite ended (before the fix: perhaps only now)
    await store.aclose()
    reopened = FileInbox(tmp_path, writer=FileSessionStore(tmp_path, fsync=True).writer)
    contents = [e.payload["content"] for e in await reopened.unsettled()]
    assert accepted.payload["content"] in contents
    assert contents == ["compacting", "meanwhile"]  # the cancelled accept's own message was durable before it too
