"""A thread pool that holds one chosen worker-thread call at a gate: a slow disk under a caller cancelled meanwhile."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

Chooser = Callable[[Any, tuple[Any, ...]], bool]
"""`(function, its arguments)` of a call handed to the pool → whether this is the call to hold."""


class GatedPool(ThreadPoolExecutor):
    """The first call `chooses` picks starts in its own thread (a running thread cannot be cancelled), sets
    `started`, then waits for `gate`; every other call runs as usual. Install it as the loop's default executor."""

    def __init__(self, loop: asyncio.AbstractEventLoop, chooses: Chooser) -> None:
        super().__init__(max_workers=4)
        self.loop, self._chooses, self.held = loop, chooses, False
        self.gate = threading.Event()
        self.started = asyncio.Event()

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
                future.set_result(fn(*args, **kwargs))
            except BaseException as e:
                future.set_exception(e)

        threading.Thread(target=run, daemon=True).start()
        return future
