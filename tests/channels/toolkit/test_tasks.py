"""TaskSet: background tasks are kept, their failures logged, and all of them cancelled and awaited on close."""

from __future__ import annotations

import asyncio
import gc
import inspect
import warnings

import pytest
from structlog.testing import LogCapture

from channels.toolkit.tasks import TaskSet


async def test_close_cancels_and_awaits_tasks_held_at_an_event() -> None:
    tasks = TaskSet("test")
    release = asyncio.Event()
    all_started = asyncio.Event()
    started = 0
    cancelled = 0

    async def held() -> None:
        nonlocal started, cancelled
        started += 1
        if started == 20:
            all_started.set()
        try:
            await release.wait()
        except asyncio.CancelledError:
            cancelled += 1
            raise

    spawned = [tasks.spawn(held(), name=f"held-{i}") for i in range(20)]
    await all_started.wait()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await tasks.close()
        gc.collect()
    assert cancelled == 20
    assert all(t.cancelled() for t in spawned)
    assert len(tasks) == 0
    assert not [w for w in caught if "destroyed" in str(w.message)]


async def test_close_gives_running_tasks_their_grace_then_cancels_the_rest() -> None:
    tasks = TaskSet("test")
    quick_done = asyncio.Event()
    stuck = asyncio.Event()

    async def quick() -> None:
        await asyncio.sleep(0)
        quick_done.set()

    quick_task = tasks.spawn(quick(), name="quick")
    stuck_task = tasks.spawn(stuck.wait(), name="stuck")
    await tasks.close(grace_s=0.05)
    assert quick_task.done() and not quick_task.cancelled() and quick_done.is_set()
    assert stuck_task.cancelled()


async def test_a_closed_set_refuses_new_tasks_without_leaking_the_coroutine() -> None:
    tasks = TaskSet("test")
    await tasks.close()
    assert tasks.closed
    coro = asyncio.sleep(0)
    with pytest.raises(RuntimeError):
        tasks.spawn(coro, name="late")
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED  # no "never awaited" warning


async def test_a_failure_is_logged_with_the_task_name_and_the_others_go_on(log_capture: LogCapture) -> None:
    tasks = TaskSet("demo")
    other_done = asyncio.Event()

    async def fails() -> None:
        raise ValueError("boom")

    async def other() -> None:
        await asyncio.sleep(0.01)
        other_done.set()

    tasks.spawn(fails(), name="failing-one")
    tasks.spawn(other(), name="other")
    await tasks.join()
    assert other_done.is_set()
    failed = [e for e in log_capture.entries if e["event"] == "demo_task_failed"]
    assert [e["task"] for e in failed] == ["failing-one"]
    assert len(tasks) == 0


async def test_close_while_cancelled_itself_propagates_the_cancellation() -> None:
    tasks = TaskSet("test")
    inner_cancelled = asyncio.Event()

    async def stubborn() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            inner_cancelled.set()
            await asyncio.sleep(0.05)  # a slow clean-up: close() is still waiting for it
            raise

    tasks.spawn(stubborn(), name="stubborn")
    await asyncio.sleep(0)
    closer = asyncio.create_task(tasks.close())
    await inner_cancelled.wait()
    closer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closer
