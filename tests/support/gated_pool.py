"""A thread pool and a writer thread that hold one chosen worker-thread call at a gate: a slow disk under a caller
cancelled meanwhile."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from agenthub.storage.writer_thread import WriterThread

T = TypeVar("T")

Chooser = Callable[[Any, tuple[Any, ...]], bool]
"""`(function, its arguments)` of a call handed to the pool → whether this is the call to hold."""


class GatedPool(ThreadPoolExecutor):
    """The first call `chooses` picks starts in its own thread (a running thread cannot be cancelled), sets
    `started`, then waits for `gate` (`finished` once it ended); every other call runs as usual. Install it as the
    loop's default executor."""

    def __init__(self, loop: asyncio.AbstractEventLoop, chooses: Chooser) -> None:
        super().__init__(max_workers=4)
        self.loop, self._chooses, self.held = loop, chooses, False
        self.gate = threading.Event()
        self.started = asyncio.Event()
        self.finished = threading.Event()
        """Set once the held call has returned or raised."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        call = tuple(getattr(fn, "args", None) or (None,))  # asyncio.to_thread submits partial(ctx.run, func, ...)
        if self.held or not self._chooses(call[0], call[1:]):
            return super().submit(fn, *args, **kwargs)
        self.held = True
        future: Future[Any] = Future()
        future.set_running_or_notify_cancel()

        def run() -> None:
            self.loop.call_soon_threadsafe(self.started.set)
            self.gate.wait(5)
            try:
                result = fn(*args, **kwargs)
            except BaseException as e:
                self.finished.set()
                future.set_exception(e)
            else:
                self.finished.set()
                future.set_result(result)

        threading.Thread(target=run, daemon=True).start()
        return future


class GatedWriterThread(WriterThread):
    """A `WriterThread` whose first operation `chooses` picks (given the operation and `()`) sets `started` when
    the thread gets to it, then waits for `gate` (`finished` once it ended); install it as a writer's `thread`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, chooses: Chooser) -> None:
        super().__init__("gated-writer")
        self.loop, self._chooses, self.held = loop, chooses, False
        self.gate = threading.Event()
        self.started = asyncio.Event()
        self.finished = threading.Event()

    def submit(self, operation: Callable[[], T]) -> asyncio.Future[T]:
        named = getattr(operation, "func", operation)  # functools.partial(self._exclusive, ...) or a bound method
        if self.held or not self._chooses(named, ()):
            return super().submit(operation)
        self.held = True

        def held() -> T:
            self.loop.call_soon_threadsafe(self.started.set)
            self.gate.wait(5)
            try:
                return operation()
            finally:
                self.finished.set()

        return super().submit(held)
