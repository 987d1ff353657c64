"""DedupStore: duplicates within the TTL are caught, across restarts, with bounded memory and file."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agenthub.clock import ManualClock
from agenthub.errors import PathRefusedError
from agenthub.storage.dedup import DedupStore


async def test_duplicate_within_ttl_and_new_after(tmp_path: Path) -> None:
    clock = ManualClock()
    store = DedupStore(tmp_path / "d" / "seen.jsonl", ttl_s=60, clock=clock)
    assert await store.check_and_add("msg-1") is False
    assert await store.check_and_add("msg-1") is True
    clock.advance(59)
    assert await store.check_and_add("msg-1") is True  # a retry does not extend the window
    clock.advance(1)
    assert await store.check_and_add("msg-1") is False


async def test_survives_a_restart(tmp_path: Path) -> None:
    clock = ManualClock()
    path = tmp_path / "seen.jsonl"
    store = DedupStore(path, ttl_s=60, clock=clock)
    for i in range(5):
        await store.check_and_add(f"m{i}")
    with path.open("ab") as f:
        f.write(b'{"k": "torn')  # a crash mid-append
    clock.advance(30)
    restarted = DedupStore(path, ttl_s=60, clock=clock)
    assert len(restarted) == 5
    assert await restarted.check_and_add("m3") is True
    clock.advance(31)
    assert await DedupStore(path, ttl_s=60, clock=clock).check_and_add("m3") is False  # expired at reload


async def test_memory_and_file_stay_bounded_over_a_long_run(tmp_path: Path) -> None:
    clock = ManualClock()
    path = tmp_path / "seen.jsonl"
    store = DedupStore(path, ttl_s=10, clock=clock, fsync=False)
    for i in range(3000):
        assert await store.check_and_add(f"m{i}") is False
        clock.advance(0.1)  # ~100 ids live at any moment
    assert len(store) <= 101
    assert len(path.read_bytes().splitlines()) <= 3 * 101 + 100


async def test_concurrent_checks_admit_exactly_one(tmp_path: Path) -> None:
    store = DedupStore(tmp_path / "seen.jsonl", ttl_s=60, clock=ManualClock())
    results = await asyncio.gather(*(store.check_and_add("same") for _ in range(50)))
    assert results.count(False) == 1


async def test_a_failed_write_forgets_the_id_so_the_retry_is_answered(tmp_path: Path) -> None:
    path = tmp_path / "seen.jsonl"
    store = DedupStore(path, ttl_s=60, clock=ManualClock())
    path.mkdir()  # the file cannot be opened for writing now
    with pytest.raises(IsADirectoryError):
        await store.check_and_add("m1")
    path.rmdir()
    assert await store.check_and_add("m1") is False
    assert await store.check_and_add("m1") is True


class _CountingStore(DedupStore):
    """Counts the store's file writes (each write is one fsync)."""

    writes = 0

    def _append(self, line: str) -> None:
        type(self).writes += 1
        super()._append(line)


async def test_a_burst_is_group_committed_and_each_id_answered_once(tmp_path: Path) -> None:
    path = tmp_path / "seen.jsonl"
    store = _CountingStore(path, ttl_s=60)
    ids = [f"m{i}" for i in range(50)]
    results = await asyncio.gather(*(store.check_and_add(k) for k in ids + ids))
    assert results[:50] == [False] * 50  # every first sighting is new …
    assert results[50:] == [True] * 50  # … and every concurrent repeat a duplicate
    assert _CountingStore.writes <= 3  # one write + fsync per batch, not per id
    reloaded = DedupStore(path, ttl_s=60)
    assert all([await reloaded.check_and_add(k) for k in ids])


async def test_a_link_planted_at_the_file_never_receives_event_ids(tmp_path: Path) -> None:
    path, outside = tmp_path / "seen.jsonl", tmp_path / "outside.txt"
    outside.write_text("")
    store = DedupStore(path, ttl_s=60, clock=ManualClock())  # the daemon runs; then a link is planted
    path.unlink(missing_ok=True)
    path.symlink_to(outside)
    with pytest.raises(PathRefusedError):
        await store.check_and_add("evt-1")
    assert outside.read_text() == ""


async def test_a_link_found_at_start_is_not_read_and_is_replaced_by_a_real_file(tmp_path: Path) -> None:
    path, outside = tmp_path / "seen.jsonl", tmp_path / "outside.txt"
    outside.write_text('{"k": "planted", "t": 1000.0}\n')
    path.symlink_to(outside)
    store = DedupStore(path, ttl_s=60, clock=ManualClock(1000.0))
    assert await store.check_and_add("planted") is False  # nothing was read through the link
    assert not path.is_symlink() and outside.read_text() == '{"k": "planted", "t": 1000.0}\n'
