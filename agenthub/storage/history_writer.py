"""Group commit of a data directory's appends: history lines across sessions and the inbox journal's records
(`ROOT`); every append waiting when a batch starts shares its one thread hop, its one log write and its one
fdatasync (`CommitLog`); the rare whole-file operations run between batches."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import structlog

from agenthub.aio import run_to_end
from agenthub.storage.commit_log import Append, CommitLog
from agenthub.storage.history_handover import Appended, AppendedHook
from agenthub.storage.session_files import SessionFiles
from agenthub.storage.writer_thread import WriterThread

log = structlog.get_logger(__name__)

T = TypeVar("T")


Landed = Callable[[BaseException | None], None]
"""Told, on the event loop under the writer's lock (before any whole-file operation can run), how an append ended:
None (landed) or its error."""


@dataclass
class _Waiting:
    append: Append
    done: asyncio.Future[None]
    landed: Landed | None = None


class HistoryWriter:
    """The writer of one data directory's history files. `append` returns once its lines are in the file and (with
    `fsync`) durable through the commit log; `exclusive` runs a whole-file operation (replace, clear, delete) after
    a checkpoint, between batches; `ready` brings the files up to date from a log a crash left, once."""

    def __init__(self, data_dir: Path, *, fsync: bool = True) -> None:
        self._files = SessionFiles(data_dir)
        self._log = CommitLog(data_dir, self._files)
        self._fsync = fsync
        self.thread = WriterThread("history-writer")
        """Where every file operation here runs, in the order given (one long-lived thread)."""
        self._queue: list[_Waiting] = []
        self._flusher: asyncio.Task[None] | None = None
        self._io: asyncio.Lock | None = None  # one thread hop on the files at a time; made in the running loop
        self._recovered = False
        self.followers: list[AppendedHook] = []
        """Called with each landed append's hand-over (`Appended`), in write order, on the event loop, before the
        append is acknowledged (the search feed: it indexes the lines without reading the file again)."""
        self.batches = 0
        """Batches committed so far (each one thread hop, one log write and one fdatasync)."""

    @property
    def log_path(self) -> Path:
        return self._log.path

    def _lock(self) -> asyncio.Lock:
        if self._io is None:
            self._io = asyncio.Lock()
        return self._io

    async def ready(self) -> None:
        """Recover from the commit log if this process has not yet (before the first read of a history)."""
        if not self._recovered:
            async with self._lock():
                await run_to_end(self.thread.submit(self._recover_once))

    def recover_blocking(self) -> None:
        """`ready` on the caller's thread (blocking), for a reader that loads a file of the log at construction
        (the inbox); before anything else uses this writer."""
        self._recover_once()

    @property
    def fsync(self) -> bool:
        return self._fsync

    async def append(self, agent: str, stem: str, payload: bytes, *, landed: Landed | None = None) -> None:
        """Queue the lines and wait until their batch landed: OSError or PathRefusedError (nothing of them kept)
        when it was refused. `landed` hears the end first (see `Landed`)."""
        done = asyncio.get_running_loop().create_future()
        self._queue.append(_Waiting(Append(agent, stem, payload), done, landed))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name="history-group-commit")
        await asyncio.shield(done)

    async def exclusive(self, agent: str, stem: str, operation: Callable[[], T]) -> T:
        """Run `operation` (which replaces or removes `stem`'s files) in a worker thread between batches, after a
        checkpoint, with the file's cached fd closed."""
        return await self.exclusive_built(agent, stem, lambda: operation)

    async def exclusive_built(self, agent: str, stem: str, build: Callable[[], Callable[[], T]]) -> T:
        """`exclusive` of the operation `build` returns, called on the event loop once no batch is in flight: every
        append before it has landed (its `landed` told), every one after it waits for the operation's end."""
        async with self._lock():
            operation = build()
            # a cancelled caller keeps the lock until the operation ends: no append lands in a half-done rewrite
            return await run_to_end(self.thread.submit(functools.partial(self._exclusive, agent, stem, operation)))

    async def aclose(self) -> None:
        """Wait for the batch in flight, checkpoint and close every file (a clean stop leaves an empty log)."""
        flusher = self._flusher
        if flusher is not None and not flusher.done():
            await asyncio.wait([flusher])
        async with self._lock():
            try:
                await run_to_end(self.thread.submit(self._close))
            finally:
                await run_to_end(self.thread.aclose())

    async def _flush(self) -> None:
        while self._queue:
            async with self._lock():
                batch, self._queue = self._queue, []
                self.batches += 1
                handed: list[Appended] | None = [] if self.followers else None
                commit = self.thread.submit(functools.partial(self._commit, [w.append for w in batch], handed))
                cancelled = await _ended(commit)  # cancelled (a shutdown): still its real end, under the lock
                try:
                    results = commit.result()
                except Exception as e:  # recovery or the log refused: the whole batch failed
                    results = [e] * len(batch)
                self._hand_over(handed or ())
                for waiting, error in zip(batch, results, strict=True):
                    _tell(waiting, error)
            for waiting, error in zip(batch, results, strict=True):
                if error is None:
                    if not waiting.done.done():
                        waiting.done.set_result(None)
                else:
                    _fail(waiting.done, error)
            if cancelled:  # every waiter heard its batch's end; the rest of the queue goes to the next flusher
                raise asyncio.CancelledError

    def _hand_over(self, handed: Iterable[Appended]) -> None:
        for item in handed:
            for follower in list(self.followers):
                try:
                    follower(item)
                except Exception:  # a follower's failure is not the append's: it falls back to reading the file
                    log.exception("history_follower_failed")

    def _commit(self, batch: list[Append], handed: list[Appended] | None = None) -> list[BaseException | None]:
        self._recover_once()
        results = self._log.commit(batch, durable=self._fsync, handed=handed)
        if self._log.due:
            try:
                self._log.checkpoint()
            except OSError:  # the log keeps everything until the next checkpoint succeeds
                log.exception("history_checkpoint_failed")
        return results

    def _exclusive(self, agent: str, stem: str, operation: Callable[[], T]) -> T:
        self._recover_once()
        self._log.checkpoint()
        self._files.forget(agent, stem)
        return operation()

    def _recover_once(self) -> None:
        if not self._recovered:
            self._log.recover()
            self._recovered = True

    def _close(self) -> None:
        try:
            if self._recovered:  # else nothing was written here, and a log a crash left is not emptied unreplayed
                self._log.checkpoint()
        finally:
            self._files.close()
            self._log.close()


async def _ended(work: asyncio.Future[T]) -> bool:
    """Wait for `work` to end even if the caller is cancelled meanwhile; whether it was (to honour it after)."""
    cancelled = False
    while not work.done():
        try:
            await asyncio.wait([work])
        except asyncio.CancelledError:
            cancelled = True
    return cancelled


def _tell(waiting: _Waiting, error: BaseException | None) -> None:
    if waiting.landed is not None:
        try:
            waiting.landed(error)
        except Exception:  # the append's own outcome still reaches its waiter
            log.exception("history_landed_hook_failed")


def _fail(done: asyncio.Future[None], error: BaseException) -> None:
    if not done.done():
        done.set_exception(error)
        done.exception()  # retrieved here: the waiter (if still there) re-raises it through its shield
