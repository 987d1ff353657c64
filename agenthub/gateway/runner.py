"""PendingTurn: one message waiting in (or running from) its session's queue."""

from __future__ import annotations

from dataclasses import dataclass, field

from agenthub.agent.definition import AgentDefinition
from agenthub.gateway.commands import CommandCall
from agenthub.gateway.handle import ReplyHandle
from agenthub.i18n import Locale
from agenthub.messages import InboundMessage
from agenthub.session_keys import SessionKey


@dataclass
class PendingTurn:
    """A message waiting for (or running) its turn, or a queued-tier command waiting for its place."""

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
    this (the newest) one carries the turn: its handle gets the answer."""
    command: CommandCall | None = None
    """Set for a queued-tier command: it runs in the queue's order instead of a turn, and is never joined."""
    alone: bool = False
    """Runs as a turn of its own: a message of its session accepted after it, but before the messages queued
    behind it here, is answered by another instance first."""
    began: float | None = None
    """When its turn last began (monotonic clock): what the turn reads is at least as new as every write completed
    before then (the memory files may come from the instance's copy, `MemoryStore.read_many`)."""

    @property
    def members(self) -> list[PendingTurn]:
        """Every message of the turn, in arrival order."""
        return [*self.joined, self]

    @property
    def senders(self) -> set[str]:
        return {p.message.sender_id for p in self.members if p.message.sender_id}
