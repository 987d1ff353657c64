"""The files idempotency store: a key and its answer kept for the window (across a new store on the same
directory), a key taken but never stored free again after the grace, a released key free at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from agenthub.errors import StorageError
from agenthub.storage.idempotency import ACCEPT_GRACE_S, FileIdempotency, IdempotencyRecord
from tests.support.disks import fill, small_tmpfs

WINDOW_S = 3600.0


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_a_key_is_kept_for_the_window_and_its_answer_survives_a_new_store(tmp_path: Path) -> None:
    clock = Clock()
    store = FileIdempotency(tmp_path, window_s=WINDOW_S, fsync=False, clock=clock)
    assert await store.claim("s", "k", "fp") is None
    await store.accepted("s", "k")
    await store.finish("s", "k", {"done": {"full_text": "a"}})
    reopened = FileIdempotency(tmp_path, window_s=WINDOW_S, fsync=False, clock=clock)
    assert await reopened.claim("s", "k", "other") == IdempotencyRecord("fp", True, {"done": {"full_text": "a"}})
    assert await reopened.claim("t", "k", "fp") is None  # another scope
    clock.now += WINDOW_S
    assert await reopened.get("s", "k") is None
    assert await reopened.claim("s", "k", "new") is None  # out of the window: a new request


async def test_a_key_never_stored_frees_after_the_grace_and_a_released_one_at_once(tmp_path: Path) -> None:
    clock = Clock()
    store = FileIdempotency(tmp_path, window_s=WINDOW_S, fsync=False, clock=clock)
    assert await store.claim("s", "k", "fp") is None
    assert await store.claim("s", "k", "fp") == IdempotencyRecord("fp")  # running: a retry joins
    clock.now += ACCEPT_GRACE_S
    assert await store.claim("s", "k", "fp") is None  # the taker died before storing: free again
    await store.release("s", "k")
    assert await store.claim("s", "k", "fp") is None


async def test_a_full_disk_is_a_storage_error_and_the_key_stays_unclaimed(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "data") as disk:
        store = FileIdempotency(disk, window_s=WINDOW_S, fsync=False, clock=Clock())
        filler = fill(disk)
        with pytest.raises(StorageError):  # the chat route's StorageError path, never a raw OSError (a 500)
            await store.claim("token:a:c", "k1", "fp")
        filler.unlink()
        assert await store.claim("token:a:c", "k1", "fp") is None  # nothing half-written blocks the first claim
