"""Group commit of a data directory's appends: history lines across sessions and the inbox journal's records
(`ROOT`); every append waiting when the writer's thread starts a batch shares its one log write and its one
fdatasync (`CommitLog`); the rare whole-file operations run between batches."""

from __future__ import annotations

import asyncio
import functools
import threading
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
"""Told, on the event loop before any whole-file operation can run, how an append ended: None (landed) or its
error."""


@dataclass
class _Waiting:
    append: Append
    done: asyncio.Future[None]
    landed: Landed | None = None


class HistoryWriter:
    """The writer of one data directory's history files. `append` returns once its lines are in the file and (with
    `fsync`) durable through the commit log; `exclusive` runs a whole-file operation (replace, clear, delete) after
    a checkpoint, between batches; `ready` brings the files up to date from a log a crash left, once.

    The batches are formed on the writer's thread: an append joins the open batch, and the first one after a batch
    was taken hands the thread one `_commit`, which takes every append waiting when the thread gets to it. So the
    appends that arrive while a batch is being written go to the file and the log right after it, without waiting
    for the event loop to come round; each batch's outcome is told on the loop, in write order."""

    def __init__(self, data_dir: Path, *, fsync: bool = True) -> None:
        self._files = SessionFiles(data_dir)
        self._log = CommitLog(data_dir, self._files)
        self._fsync = fsync
        self.thread = WriterThread("history-writer")
        """Where every file operation here runs, in the order given (one long-lived thread)."""
        self._mutex = threading.Lock()  # the open batch, shared with the thread that takes it
        self._open: list[_Waiting] = []
        self._armed = False  # a `_commit` that takes the open batch is on its way to the thread
        self._held = 0  # whole-file operations waiting or running: appends meanwhile wait in `_later`
        self._later: list[_Waiting] = []
        self._in_flight = 0  # batches given to the thread whose outcome was not told yet
        self._quiet: list[asyncio.Future[None]] = []
        self._io: asyncio.Lock | None = None  # one whole-file operation at a time; made in the running loop
        self._recovered = False
        self.followers: list[AppendedHook] = []
        """Called with each landed append's hand-over (`Appended`), in write order, on the event loop, before the
        append is acknowledged (the search feed: it indexes the lines without reading the file again)."""
        self.batches = 0
        """Batches handed to the thread so far (each one thread hop, one log write and one fdatasync)."""

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
        waiting = _Waiting(Append(agent, stem, payload), asyncio.get_running_loop().create_future(), landed)
        if self._held:  # a whole-file operation goes first: every append after it lands after it
            self._later.append(waiting)
        else:
            self._join([waiting])
        await asyncio.shield(waiting.done)

    def _join(self, waiting: list[_Waiting]) -> None:
        """Add `waiting` to the open batch; hand the thread a `_commit` when none is on its way yet."""
        with self._mutex:
            self._open.extend(waiting)
            arm, self._armed = not self._armed, True
        if arm:
            self.batches += 1
            self._in_flight += 1
            self.thread.submit(self._commit).add_done_callback(self._landed)

    async def exclusive(self, agent: str, stem: str, operation: Callable[[], T]) -> T:
        """Run `operation` (which replaces or removes `stem`'s files) in a worker thread between batches, after a
        checkpoint, with the file's cached fd closed."""
        return await self.exclusive_built(agent, stem, lambda: operation)

    async def exclusive_built(self, agent: str, stem: str, build: Callable[[], Callable[[], T]]) -> T:
        """`exclusive` of the operation `build` returns, called on the event loop once no batch is in flight: every
        append before it has landed (its `landed` told), every one after it waits for the operation's end."""
        async with self._lock():
            self._held += 1
            try:
                await self._batches_told()
                operation = build()
                # a cancelled caller keeps the hold until the operation ends: no append lands in a half-done rewrite
                return await run_to_end(self.thread.submit(functools.partial(self._exclusive, agent, stem, operation)))
            finally:
                self._held -= 1
                if not self._held and self._later:
                    later, self._later = self._later, []
                    self._join(later)

    async def _batches_told(self) -> None:
        """Return once every batch given to the thread so far has been told (its appends landed or refused)."""
        while self._in_flight:
            quiet = asyncio.get_running_loop().create_future()
            self._quiet.append(quiet)
            await asyncio.shield(quiet)

    async def aclose(self) -> None:
        """Wait for the batches in flight, checkpoint and close every file (a clean stop leaves an empty log)."""
        async with self._lock():
            await self._batches_told()
            try:
                await run_to_end(self.thread.submit(self._close))
            finally:
                await run_to_end(self.thread.aclose())

    def _commit(self) -> tuple[list[_Waiting], list[BaseException | None], list[Appended]]:
        """On the thread: take the open batch and write it (the outcome is told on the loop by `_landed`)."""
        with self._mutex:
            batch, self._open, self._armed = self._open, [], False
        handed: list[Appended] | None = [] if self.followers else None
        try:
            self._recover_once()
            results = self._log.commit([w.append for w in batch], durable=self._fsync, handed=handed)
        except Exception as e:  # recovery or the log refused: the whole batch failed
            return batch, [e] * len(batch), []
        if self._log.due:
            try:
                self._log.checkpoint()
            except OSError:  # the log keeps everything until the next checkpoint succeeds
                log.exception("history_checkpoint_failed")
        return batch, results, handed or []

    def _landed(
        self, commit: asyncio.Future[tuple[list[_Waiting], list[BaseException | None], list[Appended]]]
    ) -> None:
        """On the loop, in write order: hand the batch over to the followers, tell each append how it ended."""
        self._in_flight -= 1
        try:
            batch, results, handed = commit.result()
            self._hand_over(handed)
            for waiting, error in zip(batch, results, strict=True):
                _tell(waiting, error)
            for waiting, error in zip(batch, results, strict=True):
                if error is None:
                    if not waiting.done.done():
                        waiting.done.set_result(None)
                else:
                    _fail(waiting.done, error)
        finally:
            if not self._in_flight:
                quiet, self._quiet = self._quiet, []
                for waiter in quiet:
                    if not waiter.done():
                        waiter.set_result(None)

    def _hand_over(self, handed: Iterable[Appended]) -> None:
        for item in handed:
            for follower in list(self.followers):
                try:
                    follower(item)
                except Exception:  # a follower's failure is not the append's: it falls back to reading the file
                    log.exception("history_follower_failed")

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
