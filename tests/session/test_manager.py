"""SessionManager: TTL that resets on every message, a lock with a timeout, status; driven by a manual clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from agenthub.clock import ManualClock
from agenthub.errors import SessionBusyError
from agenthub.session.history import SessionHistory
from agenthub.session.manager import LockHolder, Session, SessionManager, SessionStatus
from agenthub.storage.keys import session_key

KEY = session_key("default", "wecom", "zhangsan")
OTHER = session_key("default", "wecom", "lisi")


def _status(session: Session) -> SessionStatus:
    return session.status  # read through a call, so mypy does not narrow across state changes


def _manager(clock: ManualClock, **kwargs: object) -> SessionManager:
    return SessionManager(ttl_s=60.0, lock_timeout_s=10.0, clock=clock, **kwargs)  # type: ignore[arg-type]


def test_get_or_create_returns_the_same_live_session() -> None:
    clock = ManualClock(500.0)
    manager = _manager(clock)
    session = manager.get_or_create(KEY)
    assert (session.channel, session.chat_id, session.status, session.created_at) == (
        "wecom",
        "zhangsan",
        "idle",
        500.0,
    )
    clock.advance(3)
    assert manager.get_or_create(KEY) is session
    assert session.last_active == 503.0 and session.created_at == 500.0
    assert len(manager) == 1 and KEY in manager


def test_second_acquire_fails_while_held_and_sessions_are_independent() -> None:
    manager = _manager(ManualClock())
    session = manager.acquire(KEY, "m1")
    assert session.status is SessionStatus.PROCESSING and manager.is_busy(KEY)
    with pytest.raises(SessionBusyError, match="m1"):
        manager.acquire(KEY, "m2")
    manager.acquire(OTHER, "m3")  # another session is not blocked
    assert manager.release(KEY, "m2") is False  # not the holder
    assert manager.release(KEY, "m1") is True
    assert _status(session) is SessionStatus.IDLE and not manager.is_busy(KEY)
    manager.acquire(KEY, "m2")


def test_failed_turn_marks_error_and_the_next_turn_recovers() -> None:
    manager = _manager(ManualClock())
    manager.acquire(KEY, "m1")
    manager.release(KEY, "m1", failed=True)
    assert manager.get_or_create(KEY).status is SessionStatus.ERROR
    assert manager.acquire(KEY, "m2").status is SessionStatus.PROCESSING


def test_lock_timeout_force_releases_marks_error_and_calls_back() -> None:
    clock = ManualClock()
    timed_out: list[tuple[Session, LockHolder]] = []
    manager = _manager(clock, on_lock_timeout=lambda s, h: timed_out.append((s, h)))
    session = manager.acquire(KEY, "hung")
    clock.advance(9.9)
    manager.sweep()
    assert manager.is_busy(KEY) and timed_out == []
    clock.advance(0.1)
    manager.sweep()
    assert not manager.is_busy(KEY)
    assert session.status is SessionStatus.ERROR
    assert [(s.key, h.message_id, h.acquired_at) for s, h in timed_out] == [(KEY, "hung", clock.now - 10.0)]
    assert manager.release(KEY, "hung") is False  # the hung turn finishing late changes nothing
    assert session.status is SessionStatus.ERROR
    manager.acquire(KEY, "next")


def test_per_agent_lock_timeout_override() -> None:
    clock = ManualClock()
    manager = _manager(clock)
    manager.get_or_create(KEY, lock_timeout_s=300.0)
    manager.acquire(KEY, "long")
    clock.advance(200)
    manager.sweep()
    assert manager.is_busy(KEY)
    clock.advance(100)
    manager.sweep()
    assert not manager.is_busy(KEY)


def test_ttl_resets_on_every_message_and_expiry_drops_only_the_object() -> None:
    clock = ManualClock()
    expired: list[Session] = []
    manager = _manager(clock, on_expire=expired.append)
    manager.get_or_create(KEY)
    for _ in range(5):
        clock.advance(50)
        manager.get_or_create(KEY)  # a message: activity
        manager.sweep()
    assert KEY in manager
    clock.advance(59.9)
    manager.sweep()
    assert KEY in manager
    clock.advance(0.1)
    manager.sweep()
    assert KEY not in manager and [s.key for s in expired] == [KEY]


def test_a_held_lock_keeps_the_session_alive_past_its_ttl() -> None:
    clock = ManualClock()
    manager = SessionManager(ttl_s=5.0, lock_timeout_s=100.0, clock=clock)
    manager.acquire(KEY, "m")
    clock.advance(50)
    manager.sweep()
    assert KEY in manager and manager.is_busy(KEY)


def test_release_counts_as_activity() -> None:
    clock = ManualClock()
    manager = _manager(clock)
    manager.acquire(KEY, "m")
    clock.advance(59)
    manager.release(KEY, "m")
    clock.advance(59)
    manager.sweep()
    assert KEY in manager


def test_a_failing_callback_does_not_stop_the_sweep() -> None:
    clock = ManualClock()

    def boom(session: Session, holder: LockHolder) -> None:
        raise RuntimeError("gateway bug")

    manager = _manager(clock, on_lock_timeout=boom)
    manager.acquire(KEY, "a")
    manager.acquire(OTHER, "b")
    clock.advance(10)
    manager.sweep()
    assert not manager.is_busy(KEY) and not manager.is_busy(OTHER)


async def test_ttl_expiry_keeps_the_history_file(tmp_path: Path) -> None:
    clock = ManualClock()
    history = SessionHistory(tmp_path / "data", fsync=False, clock=clock)
    manager = _manager(clock, on_expire=lambda s: history.evict(s.key))
    manager.get_or_create(KEY)
    await history.append(KEY, {"role": "user", "content": "remember me"})
    clock.advance(61)
    manager.sweep()
    assert KEY not in manager and KEY not in history._entries
    assert history.layout("default").history_file(KEY).exists()
    assert [m["content"] for m in await history.load(KEY)] == ["remember me"]
    assert manager.get_or_create(KEY).status is SessionStatus.IDLE  # a fresh Session object


def test_lock_timeout_can_be_given_at_acquire() -> None:
    clock = ManualClock()
    manager = _manager(clock)
    manager.acquire(KEY, "m", lock_timeout_s=30.0)
    clock.advance(20)
    manager.sweep()
    assert manager.is_busy(KEY)
