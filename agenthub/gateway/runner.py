"""Per-session queues: one runner task per busy session works through its messages in arrival order."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field

from agenthub.agent.definition import AgentDefinition
from agenthub.gateway.handle import ReplyHandle
from agenthub.i18n import Locale
from agenthub.messages import InboundMessage
from agenthub.storage.keys import SessionKey


@dataclass
class PendingTurn:
    """A message waiting for (or running) its turn."""

    message: InboundMessage
    key: SessionKey
    agent: AgentDefinition
    handle: ReplyHandle
    message_id: str
    locale: Locale = "en"
    """The chat's locale (`i18n.locale_for` of the message's channel and agent): every text the turn writes uses it."""
    waited: bool = False
    """True when it arrived while the session was busy (a turn running or queued, or maintenance)."""
    joined: list[PendingTurn] = field(default_factory=list)
    """Messages that waited with this one behind the previous turn and go to the model with it, earlier first;
    this (the newest) one carries the turn: its handle gets the answer, its id holds the lock."""

    @property
    def members(self) -> list[PendingTurn]:
        """Every message of the turn, in arrival order."""
        return [*self.joined, self]

    @property
    def senders(self) -> set[str]:
        return {p.message.sender_id for p in self.members if p.message.sender_id}


@dataclass
class SessionRunner:
    """The queue and the running turn of one session; exists only while the session has work."""

    key: SessionKey
    queue: deque[PendingTurn] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None
    current: PendingTurn | None = None
    turn_task: asyncio.Task[None] | None = None
    abort_reason: str | None = None
    mutex: asyncio.Lock = field(default_factory=asyncio.Lock)
    holds: int = 0  # `GatewayCore.hold` blocks holding or waiting for the mutex; the runner stays while any do

    @property
    def depth(self) -> int:
        return len(self.queue) + (1 if self.current is not None else 0)

    def take_next(self) -> PendingTurn:
        """The next turn (the queue must not be empty): a message that found the session free runs alone;
        messages that waited behind something go together, carried by the newest of them."""
        if not self.queue[0].waited:
            return self.queue.popleft()
        waiting = list(self.queue)
        self.queue.clear()
        lead = waiting[-1]
        lead.joined = waiting[:-1]
        return lead

    def abort(self, reason: str) -> bool:
        """Cancel the running turn (if any); its handle ends with an ErrorEvent coded `reason`."""
        if self.turn_task is None or self.turn_task.done():
            return False
        self.abort_reason = reason
        self.turn_task.cancel()
        return True
