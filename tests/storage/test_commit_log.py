"""The history commit log: appends of many sessions share one batch (one log write, one fdatasync), and what the
log acknowledged is brought back into the history files at start after a power cut lost their unsynced tails."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from agenthub.errors import PathRefusedError, StorageError
from agenthub.session.history import SessionHistory
from agenthub.session_keys import SessionKey, session_key
from agenthub.storage import jsonl
from agenthub.storage.commit_log import LOG_FILE, Append, CommitLog, _entries
from agenthub.storage.files import FileSessionStore
from agenthub.storage.session_files import SessionFiles
from agenthub.storage.stores import open_stores
from tests.support.roots import make_settings

KEYS = [session_key("default", "http", f"c{i}") for i in range(20)]


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": 1}


def _contents(path: Path) -> list[str]:
    return [r["content"] for r in jsonl.read_records(path)]


def _history_file(data: Path, key: SessionKey) -> Path:
    return data / key.agent / "sessions" / (key.file_stem + ".jsonl")


def _log_entries(data: Path) -> list[tuple[str, int]]:
    found, end = _entries((data / LOG_FILE).read_bytes())
    assert end == (data / LOG_FILE).stat().st_size
    return [(item.stem, offset) for item, offset in found]


async def test_appends_waiting_together_share_one_batch_and_each_is_logged_once(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, fsync=True)
    await store.append(KEYS[0], [_user("warm")])  # the first batch: recovery and the log's creation
    before = store.writer.batches
    await asyncio.gather(*(store.append(key, [_user(f"m{i}")]) for i, key in enumerate(KEYS)))
    assert store.writer.batches - before <= 2  # one batch, or two when the first started before the rest queued
    logged = sorted(stem for stem, _ in _log_entries(tmp_path))
    assert logged == sorted([KEYS[0].file_stem] + [k.file_stem for k in KEYS])
    for i, key in enumerate(KEYS):
        assert _contents(_history_file(tmp_path, key))[-1] == f"m{i}"


async def test_a_power_cut_after_the_log_synced_loses_nothing_acknowledged(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, fsync=True)
    for n in range(3):
        await asyncio.gather(*(store.append(key, [_user(f"{key.chat_id}-{n}")]) for key in KEYS[:5]))
    # a power cut: the history files never synced lose their tails (one all of it, one half a line)
    first, second = _history_file(tmp_path, KEYS[0]), _history_file(tmp_path, KEYS[1])
    first.unlink()
    data = second.read_bytes()
    second.write_bytes(data[: len(data) // 2])
    for _ in range(2):  # a second start (a crash during the first recovery) changes nothing: idempotent
        restarted = SessionHistory(store=FileSessionStore(tmp_path, fsync=True))
        for key in KEYS[:5]:
            assert [m["content"] for m in await restarted.load(key)] == [f"{key.chat_id}-{n}" for n in range(3)]


async def test_a_torn_batch_at_the_end_of_the_log_is_cut_and_later_batches_are_recovered(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, fsync=True)
    await store.append(KEYS[0], [_user("one")])
    with (tmp_path / LOG_FILE).open("ab") as f:
        f.write(b'{"a":"default","s":"default_http_c0","o":99,"n":5')  # a batch the crash cut: never acknowledged
    restarted = FileSessionStore(tmp_path, fsync=True)
    await restarted.append(KEYS[0], [_user("two")])
    _history_file(tmp_path, KEYS[0]).unlink()  # the power cut again
    assert [m["content"] for m in await FileSessionStore(tmp_path).load(KEYS[0])] == ["one", "two"]


async def test_a_replace_checkpoints_first_so_no_older_append_is_replayed_onto_it(tmp_path: Path) -> None:
    history = SessionHistory(tmp_path, fsync=True)
    await history.append(KEYS[0], _user("old one"), _user("old two"))
    await history.replace(KEYS[0], [_user("summary")])
    await history.append(KEYS[0], _user("new"))
    assert [stem for stem, _ in _log_entries(tmp_path)] == [KEYS[0].file_stem]  # only the append after it
    restarted = SessionHistory(tmp_path, fsync=True)
    assert [m["content"] for m in await restarted.load(KEYS[0])] == ["summary", "new"]


async def test_a_clean_close_leaves_an_empty_log_and_the_files_synced(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, fsync=True)
    await asyncio.gather(*(store.append(key, [_user("x")]) for key in KEYS[:3]))
    assert (tmp_path / LOG_FILE).stat().st_size > 0
    await store.aclose()
    assert (tmp_path / LOG_FILE).stat().st_size == 0
    await store.append(KEYS[0], [_user("after close")])  # a closed store opens its files again when used
    assert _contents(_history_file(tmp_path, KEYS[0])) == ["x", "after close"]


async def test_without_fsync_nothing_is_logged(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, fsync=False)
    await store.append(KEYS[0], [_user("x")])
    assert not (tmp_path / LOG_FILE).exists() or (tmp_path / LOG_FILE).stat().st_size == 0


async def test_one_refused_session_fails_alone_in_its_batch(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, fsync=True)
    await asyncio.gather(store.append(KEYS[0], [_user("a")]), store.append(KEYS[1], [_user("b")]))
    meta = tmp_path / "default" / "sessions" / (KEYS[1].file_stem + ".meta.json")
    meta.symlink_to(tmp_path / "elsewhere.json")
    results = await asyncio.gather(
        store.append(KEYS[0], [_user("a2")]), store.append(KEYS[1], [_user("b2")]), return_exceptions=True
    )
    assert results[0] is None and isinstance(results[1], PathRefusedError)
    assert _contents(_history_file(tmp_path, KEYS[0])) == ["a", "a2"]
    assert _contents(_history_file(tmp_path, KEYS[1])) == ["b"]
    assert [stem for stem, _ in _log_entries(tmp_path)].count(KEYS[1].file_stem) == 1


def test_the_open_files_stay_within_their_bound_once_synced(tmp_path: Path) -> None:
    files = SessionFiles(tmp_path, max_open=4)
    log = CommitLog(tmp_path, files)
    results = log.commit([Append("default", f"s{i}", b'{"n": 1}\n') for i in range(10)], durable=True)
    assert results == [None] * 10
    assert log.due  # ten files wait for the checkpoint, more than the bound keeps open
    log.checkpoint()
    assert not log.due and (tmp_path / LOG_FILE).stat().st_size == 0
    assert len(files.dirty()) == 0
    assert all(jsonl.read_records(tmp_path / "default" / "sessions" / f"s{i}.jsonl") == [{"n": 1}] for i in range(10))
    files.close()
    log.close()


def test_as_many_waiting_files_as_the_bound_keeps_open_is_no_checkpoint_yet(tmp_path: Path) -> None:
    files = SessionFiles(tmp_path, max_open=4)
    log = CommitLog(tmp_path, files)
    assert log.commit([Append("default", f"s{i}", b'{"n": 1}\n') for i in range(4)], durable=True) == [None] * 4
    assert not log.due and len(files.dirty()) == 4
    assert log.commit([Append("default", "s4", b'{"n": 1}\n')], durable=True) == [None]
    assert log.due
    files.close()
    log.close()


async def test_a_log_that_cannot_be_written_fails_the_batch_and_keeps_nothing(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, fsync=True)
    await store.append(KEYS[0], [_user("kept")])
    await store.aclose()
    (tmp_path / LOG_FILE).unlink()
    (tmp_path / LOG_FILE).symlink_to(tmp_path / "elsewhere.log")
    with pytest.raises(StorageError):
        await store.append(KEYS[0], [_user("refused")])
    assert _contents(_history_file(tmp_path, KEYS[0])) == ["kept"]
    assert not (tmp_path / "elsewhere.log").exists()


async def test_opening_the_files_backend_replays_the_log_before_anything_reads_the_files(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    store = FileSessionStore(settings.data_dir, fsync=True)
    await store.append(KEYS[0], [_user("acknowledged")])
    _history_file(settings.data_dir, KEYS[0]).unlink()  # a power cut before the file itself was synced
    stores = await open_stores(settings)
    try:
        assert _contents(_history_file(settings.data_dir, KEYS[0])) == ["acknowledged"]  # on disk, not only loaded
    finally:
        await stores.aclose()
    assert (settings.data_dir / LOG_FILE).stat().st_size == 0  # the clean stop's checkpoint emptied the log


_OTHER_PROCESS = """
import asyncio, sys
from pathlib import Path
from agenthub.storage.files import FileSessionStore

async def main() -> None:
    store = FileSessionStore(Path(sys.argv[1]), fsync=True)
    await store.recover()  # what open_backend does (`agenthub token` opens the stores while the daemon runs)
    await store.aclose()

asyncio.run(main())
"""


async def test_another_process_opening_the_files_leaves_the_live_writers_log_alone(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, fsync=True)
    await store.recover()
    await asyncio.gather(*(store.append(key, [_user(key.chat_id)]) for key in KEYS[:5]))
    logged = (tmp_path / LOG_FILE).read_bytes()
    assert logged  # acknowledged, durable only through the log until the next checkpoint
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", _OTHER_PROCESS, str(tmp_path))
    assert await asyncio.wait_for(child.wait(), 60) == 0
    assert (tmp_path / LOG_FILE).read_bytes() == logged  # not emptied nor replayed under the writer's feet
    await store.append(KEYS[0], [_user("after")])
    assert _log_entries(tmp_path)[-1][0] == KEYS[0].file_stem
    await store.aclose()
    assert (tmp_path / LOG_FILE).read_bytes() == b""  # the owner still empties it at its clean stop


async def test_a_store_closed_unused_leaves_a_crashs_log_for_the_next_start(tmp_path: Path) -> None:
    crashed = FileSessionStore(tmp_path, fsync=True)
    await crashed.append(KEYS[0], [_user("acknowledged")])
    _history_file(tmp_path, KEYS[0]).write_bytes(b"")  # a power cut: the unsynced history file lost its tail
    await FileSessionStore(tmp_path, fsync=True).aclose()  # opened and closed, never read or written
    assert _contents(_history_file(tmp_path, KEYS[0])) == [] and _log_entries(tmp_path)
    restarted = FileSessionStore(tmp_path, fsync=True)
    assert [r["content"] for r in await restarted.load(KEYS[0])] == ["acknowledged"]
