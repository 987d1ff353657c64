"""`Batches`: the calls asked for while a batch is written go together in the next one; each caller gets its own
result, or its batch's error; a store used by a second event loop (a tool's next run) still writes."""

from __future__ import annotations

import asyncio

import pytest

from agenthub.errors import StorageError
from agenthub.storage.postgres.batches import Batches


class Writer:
    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.fail = False

    async def __call__(self, items: list[int]) -> list[int]:
        self.batches.append(items)
        await asyncio.sleep(0.01)
        if self.fail:
            raise StorageError("could not write: refused")
        return [item * 10 for item in items]


async def test_calls_made_while_a_batch_is_written_go_together_in_the_next_each_with_its_result() -> None:
    writer = Writer()
    batches: Batches[int, int] = Batches(writer, "test")
    first = asyncio.create_task(batches(0))
    await asyncio.sleep(0.001)  # its batch is being written
    assert await asyncio.gather(first, *(batches(n) for n in range(1, 5))) == [0, 10, 20, 30, 40]
    assert writer.batches == [[0], [1, 2, 3, 4]]
    assert batches.written == 2


async def test_a_refused_batch_is_refused_to_each_of_its_callers_and_the_next_batch_is_written() -> None:
    writer = Writer()
    batches: Batches[int, int] = Batches(writer, "test")
    writer.fail = True
    results = await asyncio.gather(*(batches(n) for n in range(3)), return_exceptions=True)
    assert all(isinstance(r, StorageError) for r in results)
    writer.fail = False
    assert await batches(7) == 70


def test_a_second_event_loop_gets_its_batches_written() -> None:
    writer = Writer()
    batches: Batches[int, int] = Batches(writer, "test")
    assert asyncio.run(batches(1)) == 10
    assert asyncio.run(batches(2)) == 20


@pytest.mark.parametrize("callers", [1, 3])
async def test_a_cancelled_caller_s_item_is_still_written(callers: int) -> None:
    writer = Writer()
    batches: Batches[int, int] = Batches(writer, "test")
    tasks = [asyncio.create_task(batches(n)) for n in range(callers)]
    await asyncio.sleep(0)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await batches.aclose()
    assert sorted(n for batch in writer.batches for n in batch) == list(range(callers))
