"""ReplyHandle: the stream of reply events for one submitted message."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from agenthub.messages import DoneEvent, ErrorEvent, ReplyEvent

_TERMINAL = (DoneEvent, ErrorEvent)


class ReplyHandle:
    """Yields one message's reply events; always ends with exactly one `DoneEvent` or `ErrorEvent`.

    Events are buffered, so a consumer that starts late (or never) loses nothing and never blocks the turn.
    Iterating twice is an error; `result()` can be awaited instead of or after iterating.
    """

    def __init__(self, session_key: str) -> None:
        self.session_key = session_key
        self._queue: asyncio.Queue[ReplyEvent] = asyncio.Queue()
        self._final: asyncio.Future[DoneEvent | ErrorEvent] = asyncio.get_running_loop().create_future()
        self._iterated = False

    @property
    def finished(self) -> bool:
        return self._final.done()

    def emit(self, event: ReplyEvent) -> None:
        """Called by the gateway; events after the terminal one are ignored."""
        if self._final.done():
            return
        self._queue.put_nowait(event)
        if isinstance(event, _TERMINAL):
            self._final.set_result(event)

    async def result(self) -> DoneEvent | ErrorEvent:
        """Wait for the terminal event without consuming the stream."""
        return await asyncio.shield(self._final)

    async def text(self) -> str:
        """The final reply text, or raise `RuntimeError` with the user-facing error message."""
        final = await self.result()
        if isinstance(final, ErrorEvent):
            raise RuntimeError(final.message)
        return final.full_text

    async def collected(self) -> list[ReplyEvent]:
        """Every event of the reply, the terminal one last, once it has ended: one wake-up for the whole reply
        (a consumer that answers only at the end, not a task switch per streamed delta). Counts as the iteration."""
        if self._iterated:
            raise RuntimeError("a ReplyHandle can be iterated only once")
        self._iterated = True
        await self.result()
        events: list[ReplyEvent] = []
        while not self._queue.empty():
            events.append(self._queue.get_nowait())
        return events

    def __aiter__(self) -> AsyncIterator[ReplyEvent]:
        if self._iterated:
            raise RuntimeError("a ReplyHandle can be iterated only once")
        self._iterated = True
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ReplyEvent]:
        while True:
            event = await self._queue.get()
            yield event
            if isinstance(event, _TERMINAL):
                return
