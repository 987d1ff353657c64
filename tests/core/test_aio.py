"""`run_to_end`: the work ends whatever happens to its caller, and a cancelled caller is always told so."""

from __future__ import annotations

import asyncio

import pytest

from agenthub.aio import run_to_end


async def test_a_cancelled_caller_whose_work_then_fails_is_told_of_the_cancellation() -> None:
    gate = asyncio.Event()
    ended = []

    async def work() -> None:
        await gate.wait()
        ended.append(True)
        raise ValueError("the disk refused it")

    caller = asyncio.create_task(run_to_end(work()))
    await asyncio.sleep(0)
    caller.cancel()
    await asyncio.sleep(0)
    gate.set()
    await asyncio.wait([caller])
    assert ended == [True] and caller.cancelled()  # not the work's ValueError: the cancellation is never lost


async def test_an_uncancelled_caller_gets_the_work_s_result_or_failure() -> None:
    async def fails() -> None:
        raise ValueError("refused")

    async def answers() -> int:
        return 7

    assert await run_to_end(answers()) == 7
    with pytest.raises(ValueError):
        await run_to_end(fails())
