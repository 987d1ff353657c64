"""An append-only JSONL journal with group commit: records that arrive while a write is in flight share the next one."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import structlog

from agenthub import jsonsafe
from agenthub.errors import PathRefusedError, StorageError
from agenthub.storage import jsonl
from agenthub.storage.atomic import atomic_write_bytes

log = structlog.get_logger(__name__)

JournalRecord = dict[str, Any]


def _encode(records: list[JournalRecord]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records).encode("utf-8")


class Journal:
    """Durable small records in one file, written in batches: `write()` returns once its record is on disk, and a
    burst of N writers costs about two writes + fsyncs, not N.

    The owner keeps the live state in memory (rebuilt from `read()` at start) and hands a `snapshot` function; when
    the file holds more than twice the snapshot's records it is rewritten atomically to the snapshot, between
    batches. A snapshot record still waiting for its batch is left out of the rewrite: its own append follows it,
    so a record whose append fails is nowhere on disk. Atomic within one event loop.
    """

    def __init__(self, path: Path, *, snapshot: Callable[[], list[JournalRecord]], fsync: bool = True) -> None:
        self._path = path
        self._snapshot = snapshot
        self._fsync = fsync
        self._lines = 0
        self._batch: list[JournalRecord] = []
        self._batch_done: asyncio.Future[None] | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._io = asyncio.Lock()  # one file operation at a time: a rewrite never races an append

    @property
    def path(self) -> Path:
        return self._path

    def read(self) -> list[JournalRecord]:
        """Every whole record in the file (blocking; called once at start). Torn or corrupt lines are skipped."""
        try:
            data = jsonl.read_bytes_no_follow(self._path)
        except FileNotFoundError:
            return []
        except PathRefusedError:  # a planted link is never read; the next compaction replaces it by a real file
            log.warning("journal_link_refused", path=str(self._path))
            return []
        records: list[JournalRecord] = []
        for raw in data.splitlines():
            try:
                record = jsonsafe.loads(raw)
            except ValueError:
                log.warning("journal_line_skipped", path=str(self._path))
                continue
            if isinstance(record, dict):
                records.append(record)
        self._lines = len(records)
        return records

    def write(self, record: JournalRecord) -> Coroutine[Any, Any, None]:
        """Queue `record` now (so a rewrite from here on leaves it to its own append) and return what waits until
        it is durable: StorageError (nothing of it kept) when the disk refuses."""
        return self._durable(self._enqueue(record))

    async def _durable(self, done: asyncio.Future[None]) -> None:
        try:
            await asyncio.shield(done)
        except OSError as e:
            raise StorageError("could not write the journal") from e

    async def aclose(self) -> None:
        """Wait for the batch in flight (a shutdown must not cut a write the caller was promised)."""
        flusher = self._flusher
        if flusher is not None and not flusher.done():
            await asyncio.wait([flusher])

    def _enqueue(self, record: JournalRecord) -> asyncio.Future[None]:
        if self._batch_done is None:
            self._batch_done = asyncio.get_running_loop().create_future()
        self._batch.append(record)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name=f"journal-{self._path.name}")
        return self._batch_done

    async def _flush(self) -> None:
        """Write batches until none is waiting; each batch is one write and one fsync."""
        while self._batch:
            async with self._io:  # the batch is taken under the lock: a rewrite sees every unwritten record queued
                batch, done = self._batch, self._batch_done
                self._batch, self._batch_done = [], None
                assert done is not None
                try:
                    await asyncio.to_thread(self._append, _encode(batch))
                except (OSError, StorageError) as e:
                    log.error("journal_write_failed", path=str(self._path), error_type=type(e).__name__)
                    done.set_exception(e)
                    done.exception()  # retrieved here: every waiter re-raises it through its own shield
                    continue
                self._lines += len(batch)
            await self._compact_if_large()
            done.set_result(None)

    async def _compact_if_large(self) -> None:
        if self._lines > 2 * len(self._snapshot()) + 100:
            try:
                await self.compact()
            except StorageError:  # the appended file is still complete; this compaction was only housekeeping
                log.warning("journal_compaction_failed", path=str(self._path))

    async def compact(self) -> None:
        """Rewrite the file to the owner's snapshot now (atomically, between batches): nothing of what the snapshot
        no longer holds stays on disk (forgetting a person, deleting a session). StorageError when refused."""
        async with self._io:
            live = self._written(self._snapshot())
            try:
                await asyncio.to_thread(atomic_write_bytes, self._path, _encode(live), durable=self._fsync)
            except OSError as e:
                raise StorageError("could not rewrite the journal") from e
            self._lines = len(live)

    def _written(self, snapshot: list[JournalRecord]) -> list[JournalRecord]:
        """The snapshot without the records still queued for a batch (under `_io`, nothing else is unwritten)."""
        if not self._batch:
            return snapshot
        queued = {_encode([r]) for r in self._batch}
        return [r for r in snapshot if _encode([r]) not in queued]

    def _append(self, payload: bytes) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        with jsonl.opened_no_follow(self._path, os.O_RDWR | os.O_APPEND | os.O_CREAT) as fd:  # a link: refused
            size = os.fstat(fd).st_size
            try:
                if size and os.pread(fd, 1, size - 1) != b"\n":  # a torn tail from a crash: end it first
                    os.write(fd, b"\n")
                    size += 1
                written = os.write(fd, payload)
                if written != len(payload):
                    raise OSError(28, "short write")  # ENOSPC: a short write on a regular file
                if self._fsync:
                    os.fdatasync(fd)  # the data and the file's new size; its times need no sync
            except BaseException:
                os.ftruncate(fd, size)
                raise
