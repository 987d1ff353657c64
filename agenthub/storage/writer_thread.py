"""`WriterThread`: one long-lived thread running a component's blocking file operations in the order given, each
handed over with one queue put (no executor submit, no context copy, no future chaining per call)."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

log = structlog.get_logger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class _Job:
    operation: Callable[[], Any]
    loop: asyncio.AbstractEventLoop | None = None
    done: asyncio.Future[Any] | None = None  # None: nobody waits (`post`)


_STOP = _Job(lambda: None)
IDLE_S = 10.0
"""The thread ends after this long without work (the next operation starts a new one)."""


class WriterThread:
    """Runs the operations given to `run` (awaited) and `post` (not) one after another on its own thread, started
    on first use and ended after `idle_s` without work; `close` stops it once everything given before has run."""

    def __init__(self, name: str, *, idle_s: float = IDLE_S) -> None:
        self.name = name
        self.idle_s = idle_s
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()  # the running thread's own queue
        self._thread: threading.Thread | None = None
        self._last: threading.Thread | None = None  # a thread started after it waits for it to end first
        self._start_lock = threading.Lock()

    async def run(self, operation: Callable[[], T]) -> T:
        """`operation`'s result (or its exception) once it ran on the thread, after everything given before it. A
        cancelled caller does not stop it (as with `asyncio.to_thread`)."""
        return await self.submit(operation)

    def submit(self, operation: Callable[[], T]) -> asyncio.Future[T]:
        """`operation` queued behind everything given before it; the future tells its end (a caller that must
        not give up its locks before that end waits the future out, `agenthub.aio.run_to_end`)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()
        self._give(_Job(operation, loop, done))
        return done

    def post(self, operation: Callable[[], object]) -> None:
        """Run `operation` on the thread, after everything given before it, unawaited (its failure is logged)."""
        self._give(_Job(operation))

    def close(self) -> None:
        """Stop the thread once what was given has run (blocking: from a worker thread or at the very end)."""
        with self._start_lock:
            thread, self._thread = self._thread, None
            if thread is not None:
                self._jobs.put(_STOP)
        if thread is not None:
            thread.join()

    async def aclose(self) -> None:
        """`close` without blocking the event loop."""
        if self._thread is not None:
            await asyncio.to_thread(self.close)

    def _give(self, job: _Job) -> None:
        with self._start_lock:  # a thread ending idle does so under it: the job is never left without one
            if self._thread is None:
                # each thread reads its own queue (a close's stop is never taken by the next thread), and starts
                # once the one before it ended (what was given before a close runs before what came after it)
                jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
                thread = threading.Thread(target=self._work, args=(jobs, self._last), name=self.name, daemon=True)
                self._jobs, self._thread, self._last = jobs, thread, thread
                thread.start()
            self._jobs.put(job)

    def _work(self, jobs: queue.SimpleQueue[_Job], before: threading.Thread | None) -> None:
        if before is not None:
            before.join()
        while True:
            try:
                job = jobs.get(timeout=self.idle_s)
            except queue.Empty:
                with self._start_lock:
                    if jobs.empty() and self._thread is threading.current_thread():
                        self._thread = None
                        return
                continue
            if job is _STOP:
                return
            try:
                result = job.operation()
            except BaseException as e:  # handed to the waiter (or logged): the thread goes on
                if job.loop is None or job.done is None:
                    log.error("writer_thread_operation_failed", thread=self.name, exc_info=e)
                else:
                    _answer(job.loop, job.done, None, e)
                continue
            if job.loop is not None and job.done is not None:
                _answer(job.loop, job.done, result, None)


def _answer(
    loop: asyncio.AbstractEventLoop, done: asyncio.Future[Any], result: object, error: BaseException | None
) -> None:
    def settle() -> None:
        if done.done():  # its waiter was cancelled
            return
        if error is None:
            done.set_result(result)
        else:
            done.set_exception(error)

    try:
        loop.call_soon_threadsafe(settle)
    except RuntimeError:  # the loop closed meanwhile: nobody waits any more
        log.debug("writer_thread_loop_closed")
