"""A scripted stand-in for the gateway, for channel tests that focus on the platform side."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from agenthub.channel import Submitter
from agenthub.gateway.handle import ReplyHandle
from agenthub.messages import DeltaEvent, DoneEvent, ErrorEvent, InboundMessage, ReplyEvent


@dataclass
class ScriptedSubmitter:
    """Records every submitted message and answers it with scripted events.

    `reply_for(message)` returns the full reply text (default: "echo: <content>"); it is streamed in
    `chunks` deltas with `delay_s` between them. `fail_with` turns every reply into an ErrorEvent.
    """

    reply_for: Callable[[InboundMessage], str] = lambda m: f"echo: {m.content}"
    chunks: int = 3
    delay_s: float = 0.0
    fail_with: str | None = None
    accepting: bool = True
    received: list[InboundMessage] = field(default_factory=list)
    handles: list[ReplyHandle] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def submit(self, message: InboundMessage) -> ReplyHandle:
        self.received.append(message)
        self._arrived.set()
        handle = ReplyHandle(f"default:{message.channel}:{message.chat_id}")
        self.handles.append(handle)
        task = asyncio.create_task(self._play(message, handle))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return handle

    async def _play(self, message: InboundMessage, handle: ReplyHandle) -> None:
        text = self.reply_for(message)
        for event in self._events(text):
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            handle.emit(event)

    def _events(self, text: str) -> list[ReplyEvent]:
        if self.fail_with is not None:
            return [ErrorEvent(self.fail_with)]
        size = max(1, -(-len(text) // self.chunks))
        deltas: list[ReplyEvent] = [DeltaEvent(text[i : i + size]) for i in range(0, len(text), size)]
        return [*deltas, DoneEvent(text)]

    async def wait_for(self, count: int, timeout: float = 5.0) -> None:
        """Wait until `count` messages were submitted."""
        async with asyncio.timeout(timeout):
            while len(self.received) < count:
                self._arrived.clear()
                await self._arrived.wait()


@dataclass
class RecordingSubmitter:
    """A channel's view of a real gateway: submits through it and keeps every handle (what a push channel would
    deliver)."""

    gateway: Submitter
    handles: list[ReplyHandle] = field(default_factory=list)

    @property
    def accepting(self) -> bool:
        return self.gateway.accepting

    async def submit(self, message: InboundMessage) -> ReplyHandle:
        handle = await self.gateway.submit(message)
        self.handles.append(handle)
        return handle
