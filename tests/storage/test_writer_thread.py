"""`WriterThread`: operations run in the order given on one thread, results and errors reach their waiters, an idle
thread ends and a later operation starts a new one, `close` waits for what was given."""

from __future__ import annotations

import asyncio
import functools
import threading
import time

import pytest

from agenthub.storage.writer_thread import WriterThread


async def test_operations_run_in_order_on_one_thread_off_the_loop() -> None:
    writer = WriterThread("test-writer")
    seen: list[tuple[int, str]] = []

    def step(n: int) -> int:
        seen.append((n, threading.current_thread().name))
        return n * 2

    try:
        writer.post(lambda: step(0))
        results = await asyncio.gather(*(writer.run(functools.partial(step, n)) for n in range(1, 20)))
    finally:
        await writer.aclose()
    assert results == [n * 2 for n in range(1, 20)]
    assert [n for n, _ in seen] == list(range(20))
    assert {name for _, name in seen} == {"test-writer"}


async def test_an_error_reaches_its_waiter_and_the_thread_goes_on() -> None:
    writer = WriterThread("test-writer")

    def fail() -> None:
        raise OSError("disk full")

    try:
        writer.post(fail)  # logged, not raised anywhere
        with pytest.raises(OSError, match="disk full"):
            await writer.run(fail)
        assert await writer.run(lambda: "still here") == "still here"
    finally:
        await writer.aclose()


async def test_an_idle_thread_ends_and_the_next_operation_starts_another() -> None:
    writer = WriterThread("test-writer-idle", idle_s=0.05)
    await writer.run(threading.get_ident)
    deadline = time.monotonic() + 10
    while any(t.name == "test-writer-idle" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the idle thread did not end"
        await asyncio.sleep(0.02)
    assert await writer.run(lambda: "again") == "again"
    await writer.aclose()
    assert not any(t.name == "test-writer-idle" for t in threading.enumerate())


async def test_close_runs_what_was_given_first() -> None:
    writer = WriterThread("test-writer")
    done: list[int] = []

    def slow(n: int) -> None:
        time.sleep(0.01)
        done.append(n)

    for n in range(5):
        writer.post(functools.partial(slow, n))
    await writer.aclose()
    assert done == [0, 1, 2, 3, 4]


async def test_work_given_while_a_close_waits_runs_after_what_came_before_and_the_close_returns() -> None:
    """Shared by the history writer and the usage spool: one closes it while the other still gives work."""
    writer = WriterThread("test-writer-shared")
    order: list[str] = []
    first_held = threading.Event()

    def held_first() -> None:
        first_held.wait(5)
        order.append("before close")

    writer.post(held_first)
    closing = asyncio.create_task(asyncio.to_thread(writer.close))
    await asyncio.sleep(0.05)  # the close is waiting for the thread
    after = asyncio.create_task(writer.run(lambda: order.append("after close")))
    await asyncio.sleep(0.05)
    assert order == []  # nothing given after the close overtakes what was given before it
    first_held.set()
    await asyncio.wait_for(closing, 5)
    await asyncio.wait_for(after, 5)
    assert order == ["before close", "after close"]
    await writer.aclose()
