"""A set of background tasks that logs failures and is cancelled and awaited as a whole on stop."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

log = structlog.get_logger(__name__)


class TaskSet:
    """Keeps references to running tasks so they are not garbage-collected, and ends them on `close()`."""

    def __init__(self, channel: str) -> None:
        """`channel` names the owner in the log (`<channel>_task_failed`)."""
        self._channel = channel
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def closed(self) -> bool:
        return self._closed

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run `coro` as a task kept here; `RuntimeError` (and `coro` closed, never left unawaited) once closed."""
        if self._closed:
            coro.close()
            raise RuntimeError("task set is closed")
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            log.error(f"{self._channel}_task_failed", task=task.get_name(), error=repr(exc), exc_info=exc)

    async def join(self) -> None:
        """Wait until every task running now has finished (tests and benchmarks use it)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self, grace_s: float = 0.0) -> None:
        """Refuse new tasks, give running ones `grace_s` to finish, cancel the rest and wait; idempotent.

        Cancelling `close()` itself propagates (the tasks are cancelled already and end on their own)."""
        self._closed = True
        if self._tasks and grace_s > 0:
            await asyncio.wait(list(self._tasks), timeout=grace_s)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
