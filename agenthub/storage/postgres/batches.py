"""`Batches`: group commit of one kind of small write; every call asked for while a batch is being written goes in
the next batch, one statement for all of them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Batches(Generic[T, R]):
    """`await batches(item)` returns `write`'s result for `item` once the batch holding it is written, or raises
    what `write` raised for that batch. The batch is written by a task of its own: a caller that is cancelled
    meanwhile stops waiting, its item is written all the same (`aclose` waits for it)."""

    def __init__(self, write: Callable[[list[T]], Awaitable[Sequence[R]]], name: str) -> None:
        self._write = write
        self._name = name
        self._waiting: list[tuple[T, asyncio.Future[R]]] = []
        self._task: asyncio.Task[None] | None = None
        self.written = 0
        """Batches written so far."""

    async def __call__(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        if self._task is not None and self._task.get_loop() is not loop:  # that loop was closed (a tool's next run)
            self._task, self._waiting = None, [w for w in self._waiting if w[1].get_loop() is loop]
        self._waiting.append((item, future))
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name=self._name)
        return await future

    async def _run(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            try:
                results = await self._write([item for item, _ in batch])
            except asyncio.CancelledError:  # the loop is closing: nobody waits for an answer any more
                for _, future in [*batch, *self._waiting]:
                    future.cancel()
                raise
            except Exception as e:  # the batch's error is each of its callers' (never swallowed: they raise it)
                for _, future in batch:
                    if not future.done():
                        future.set_exception(e)
                continue
            self.written += 1
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)

    async def aclose(self) -> None:
        """Wait for the batches asked for so far to be written."""
        if self._task is not None and not self._task.done():
            await asyncio.wait([self._task])
