"""SessionManager: in-memory Session objects with a TTL, status, and a per-session lock with a timeout."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from agenthub.clock import Clock, system_clock
from agenthub.errors import SessionBusyError
from agenthub.storage.keys import SessionKey

log = structlog.get_logger(__name__)


class SessionStatus(enum.StrEnum):
    IDLE = "idle"
    PROCESSING = "processing"
    ERROR = "error"


@dataclass(frozen=True)
class LockHolder:
    message_id: str
    acquired_at: float


@dataclass
class Session:
    """One live session; never persisted (a restart loses these, never history)."""

    key: SessionKey
    created_at: float
    last_active: float
    status: SessionStatus = SessionStatus.IDLE
    lock: LockHolder | None = None
    lock_timeout_s: float = 120.0

    @property
    def channel(self) -> str:
        return self.key.channel

    @property
    def chat_id(self) -> str:
        return self.key.chat_id


TimeoutCallback = Callable[[Session, LockHolder], None]


class SessionManager:
    """Creates sessions on demand, expires idle ones, and guards each with a lock that times out.

    `sweep()` does both housekeeping jobs against the injected clock; the gateway calls it from a timer.
    A lock older than its session's `lock_timeout_s` is force-released, the session is marked `error`,
    and `on_lock_timeout(session, holder)` is called so the owner can cancel the hung turn.
    """

    def __init__(
        self,
        *,
        ttl_s: float = 3600.0,
        lock_timeout_s: float = 120.0,
        clock: Clock = system_clock,
        on_lock_timeout: TimeoutCallback | None = None,
        on_expire: Callable[[Session], None] | None = None,
    ) -> None:
        self.ttl_s = ttl_s
        self.lock_timeout_s = lock_timeout_s
        self._clock = clock
        self._sessions: dict[SessionKey, Session] = {}
        self.on_lock_timeout = on_lock_timeout
        self.on_expire = on_expire

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, key: SessionKey) -> bool:
        return key in self._sessions

    def get(self, key: SessionKey) -> Session | None:
        return self._sessions.get(key)

    def sessions(self) -> list[Session]:
        return list(self._sessions.values())

    def get_or_create(self, key: SessionKey, *, lock_timeout_s: float | None = None) -> Session:
        """The live session for `key`, created if needed; every call counts as activity (resets the TTL)."""
        now = self._clock()
        session = self._sessions.get(key)
        if session is None:
            session = Session(key=key, created_at=now, last_active=now, lock_timeout_s=self.lock_timeout_s)
            self._sessions[key] = session
        session.last_active = now
        if lock_timeout_s is not None:  # the agent's override sticks until another one is given
            session.lock_timeout_s = lock_timeout_s
        return session

    def acquire(self, key: SessionKey, message_id: str, *, lock_timeout_s: float | None = None) -> Session:
        """Take the session's lock for `message_id`; `SessionBusyError` if someone holds it."""
        session = self.get_or_create(key, lock_timeout_s=lock_timeout_s)
        if session.lock is not None:
            raise SessionBusyError(f"session {key} is busy with message {session.lock.message_id}")
        session.lock = LockHolder(message_id, self._clock())
        session.status = SessionStatus.PROCESSING
        return session

    def release(self, key: SessionKey, message_id: str, *, failed: bool = False) -> bool:
        """Release the lock if `message_id` still holds it; False when it was already force-released."""
        session = self._sessions.get(key)
        if session is None or session.lock is None or session.lock.message_id != message_id:
            return False
        session.lock = None
        session.status = SessionStatus.ERROR if failed else SessionStatus.IDLE
        session.last_active = self._clock()
        return True

    def is_busy(self, key: SessionKey) -> bool:
        session = self._sessions.get(key)
        return session is not None and session.lock is not None

    def sweep(self) -> None:
        """Force-release timed-out locks, then drop sessions idle longer than the TTL."""
        now = self._clock()
        for session in list(self._sessions.values()):
            holder = session.lock
            if holder is not None and now - holder.acquired_at >= session.lock_timeout_s:
                self._force_release(session, holder)
            elif holder is None and now - session.last_active >= self.ttl_s:
                del self._sessions[session.key]
                if self.on_expire is not None:
                    _call_safely("session_expire_callback_failed", self.on_expire, session)

    def _force_release(self, session: Session, holder: LockHolder) -> None:
        log.warning(
            "session_lock_timeout",
            session_key=str(session.key),
            message_id=holder.message_id,
            held_s=round(self._clock() - holder.acquired_at, 1),
        )
        session.lock = None
        session.status = SessionStatus.ERROR
        if self.on_lock_timeout is not None:
            _call_safely("session_lock_timeout_callback_failed", self.on_lock_timeout, session, holder)


def _call_safely(event: str, callback: Callable[..., None], session: Session, *args: object) -> None:
    """Run a housekeeping callback; one that raises is logged and must not stop the sweep of other sessions."""
    try:
        callback(session, *args)
    except Exception:
        log.exception(event, session_key=str(session.key))
