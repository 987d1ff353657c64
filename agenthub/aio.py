"""Small asyncio helpers shared by the core."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

import structlog

log = structlog.get_logger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


async def run_to_end(work: Coroutine[Any, Any, R] | asyncio.Future[R]) -> R:
    """Await `work` to its end even if the caller is cancelled meanwhile, then honour the cancellation.

    For writes that hand a file to a worker thread: cancelling the await would leave the thread writing after
    the caller gave up its locks and caches, so the file and the in-memory state would disagree.
    """
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await _ended(task)  # neither cancels the work nor raises its failure (a cancellation wins)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        error = None if task.cancelled() else task.exception()
        if error is not None:  # the cancellation wins; the work's own failure is still reported
            log.warning("work_failed_during_cancellation", error_type=type(error).__name__, error=str(error))
        raise asyncio.CancelledError
    return task.result()


async def _ended(task: asyncio.Future[Any]) -> None:
    """Return once `task` is done (`asyncio.wait([task])` without its sets and bookkeeping: on every write's path)."""
    waiter = asyncio.get_running_loop().create_future()
    wake = functools.partial(_wake, waiter)
    task.add_done_callback(wake)
    try:
        await waiter
    finally:
        task.remove_done_callback(wake)


def _wake(waiter: asyncio.Future[None], _: object) -> None:
    if not waiter.done():
        waiter.set_result(None)


def succeeded(task: asyncio.Future[Any]) -> bool:
    """Whether `task` finished with a result (not cancelled, no exception)."""
    return task.done() and not task.cancelled() and task.exception() is None


def runs_to_end(method: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """Decorator form of `run_to_end`."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        return await run_to_end(method(*args, **kwargs))

    return wrapper
