"""One object per live session (queue, mutex, status, running turn, TTL bookkeeping) and the registry that owns them."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import structlog

from agenthub.gateway.inbox_replay import inbox_seq_of
from agenthub.gateway.runner import PendingTurn
from agenthub.session_keys import SessionKey

log = structlog.get_logger(__name__)


class SessionStatus(enum.StrEnum):
    IDLE = "idle"
    PROCESSING = "processing"
    ERROR = "error"


@dataclass(slots=True)
class SessionState:
    """Everything the gateway knows about one session in memory; never persisted (a restart loses it, never history).

    It exists while the session has work (a queued or running turn, a hold) and, once it has seen a message,
    until it has been idle for the TTL.
    """

    key: SessionKey
    last_active: float | None = None
    """When the session last saw a message or ended a turn; None while only a hold (maintenance) created it."""
    status: SessionStatus = SessionStatus.IDLE
    queue: list[PendingTurn] = field(default_factory=list)
    """Arrival order; a list, not a deque: it is short (`max_queued`) and most sessions sit idle with it empty."""
    task: asyncio.Task[None] | None = None
    """The worker that runs the queue, while it has work."""
    current: PendingTurn | None = None
    turn_task: asyncio.Task[None] | None = None
    abort_reason: str | None = None
    mutex: asyncio.Lock = field(default_factory=asyncio.Lock)
    holds: int = 0
    """`GatewayCore.hold` blocks holding or waiting for the mutex."""

    @property
    def channel(self) -> str:
        return self.key.channel

    @property
    def chat_id(self) -> str:
        return self.key.chat_id

    @property
    def depth(self) -> int:
        """Messages running or waiting."""
        return len(self.queue) + (1 if self.current is not None else 0)

    @property
    def busy(self) -> bool:
        """A turn runs or waits, or post-turn work or maintenance holds the session."""
        return self.depth > 0 or self.holds > 0 or self.mutex.locked()

    @property
    def has_work(self) -> bool:
        """Something still needs this object: the worker, a queued message or a hold."""
        return self.task is not None or bool(self.queue) or self.holds > 0

    def active_since(self, moment: float) -> bool:
        """A message waits or runs, or the session saw one (or ended a turn) at or after `moment`."""
        if self.queue or self.current is not None:
            return True
        return self.last_active is not None and self.last_active >= moment

    def enqueue(self, pending: PendingTurn) -> None:
        """Queue `pending` in arrival order: behind everything, except that a message with an inbox sequence goes
        before the queued messages accepted after it (a resumed earlier message must not wait behind a later one)."""
        seq = inbox_seq_of(pending.message)
        if seq is not None:
            for index, queued in enumerate(self.queue):
                later = inbox_seq_of(queued.message)
                if later is not None and later > seq:
                    self.queue.insert(index, pending)
                    return
        self.queue.append(pending)

    def requeue(self, turn: PendingTurn) -> None:
        """Put a turn taken from the queue back, each of its messages in its place (an earlier one goes first)."""
        members, turn.joined = turn.members, []
        for member in members:
            member.waited = True
            self.enqueue(member)

    def take_next(self) -> PendingTurn:
        """The next entry (the queue must not be empty): a queued command, or a message that found the session
        free, runs alone; messages that waited behind something go together (up to the next queued command),
        carried by the newest of them."""
        head = self.queue[0]
        if head.command is not None or not head.waited or head.alone:
            return self.queue.pop(0)
        waiting: list[PendingTurn] = []
        while self.queue and self.queue[0].command is None:  # a queued command ends the burst
            waiting.append(self.queue.pop(0))
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


class SessionRegistry:
    """The live sessions by key: the one home of per-session state.

    `expire(now)` drops the sessions idle for longer than `ttl_s` (never one with work); the gateway calls it
    from its housekeeping timer with its injected clock.
    """

    def __init__(self, *, ttl_s: float, on_expire: Callable[[SessionKey], None] | None = None) -> None:
        self.ttl_s = ttl_s
        self.on_expire = on_expire
        self._states: dict[SessionKey, SessionState] = {}

    def __len__(self) -> int:
        return len(self._states)

    def __contains__(self, key: SessionKey) -> bool:
        return key in self._states

    def __iter__(self) -> Iterator[SessionState]:
        return iter(list(self._states.values()))

    def get(self, key: SessionKey) -> SessionState | None:
        return self._states.get(key)

    def state(self, key: SessionKey) -> SessionState:
        """The session's state, created (without counting as activity) if it has none."""
        found = self._states.get(key)
        if found is None:
            found = self._states[key] = SessionState(key)
        return found

    def touch(self, key: SessionKey, now: float) -> SessionState:
        """A message arrived (or a turn ended): the TTL starts again from `now`."""
        found = self.state(key)
        found.last_active = now
        return found

    def release(self, state: SessionState) -> None:
        """Drop a state that has no work and never saw a message (a hold on a session nobody talks to)."""
        if state.last_active is None and not state.has_work and self._states.get(state.key) is state:
            del self._states[state.key]

    def is_busy(self, key: SessionKey) -> bool:
        found = self._states.get(key)
        return found is not None and found.busy

    def queue_depth(self) -> int:
        return sum(s.depth for s in self._states.values())

    def expire(self, now: float) -> None:
        """Drop the sessions without work whose last activity is `ttl_s` or more before `now`."""
        for state in list(self._states.values()):
            if state.has_work or state.busy:
                continue
            if state.last_active is None or now - state.last_active >= self.ttl_s:
                del self._states[state.key]
                self._expired(state.key)

    def _expired(self, key: SessionKey) -> None:
        if self.on_expire is None:
            return
        try:
            self.on_expire(key)
        except Exception:  # one failing callback must not stop the expiry of the other sessions
            log.exception("session_expire_callback_failed", session_key=str(key))
