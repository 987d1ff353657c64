"""SessionRegistry: the TTL that resets on every message, expiry that keeps the history, state kept while busy."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agenthub.clock import ManualClock
from agenthub.gateway.commands import ConfirmWindow
from agenthub.gateway.session_state import SessionRegistry, SessionStatus
from agenthub.session.history import SessionHistory
from agenthub.session_keys import SessionKey, session_key

KEY = session_key("default", "wecom", "zhangsan")
OTHER = session_key("default", "wecom", "lisi")


def _registry(expired: list[SessionKey] | None = None) -> SessionRegistry:
    return SessionRegistry(ttl_s=60.0, on_expire=None if expired is None else expired.append)


def test_touch_returns_the_same_live_state_and_counts_as_activity() -> None:
    clock = ManualClock(500.0)
    registry = _registry()
    state = registry.touch(KEY, clock())
    assert (state.channel, state.chat_id, state.status, state.last_active) == ("wecom", "zhangsan", "idle", 500.0)
    clock.advance(3)
    assert registry.touch(KEY, clock()) is state
    assert state.last_active == 503.0
    assert len(registry) == 1 and KEY in registry and registry.get(OTHER) is None


def test_ttl_resets_on_every_message_and_expiry_drops_only_the_object() -> None:
    clock = ManualClock()
    expired: list[SessionKey] = []
    registry = _registry(expired)
    registry.touch(KEY, clock())
    for _ in range(5):
        clock.advance(50)
        registry.touch(KEY, clock())  # a message: activity
        registry.expire(clock())
    assert KEY in registry
    clock.advance(59.9)
    registry.expire(clock())
    assert KEY in registry
    clock.advance(0.1)
    registry.expire(clock())
    assert KEY not in registry and expired == [KEY]


async def test_a_busy_session_outlives_its_ttl() -> None:
    clock = ManualClock()
    registry = SessionRegistry(ttl_s=5.0)
    state = registry.touch(KEY, clock())
    async with state.mutex:  # a turn (or its after-turn work) holds the session
        clock.advance(50)
        registry.expire(clock())
        assert KEY in registry and registry.is_busy(KEY)
    registry.expire(clock())
    assert KEY not in registry


def test_a_hold_alone_leaves_nothing_behind_and_is_not_activity() -> None:
    registry = _registry()
    state = registry.state(KEY)  # what `GatewayCore.hold` does for a session nobody talks to
    state.holds += 1
    registry.release(state)
    assert KEY in registry and state.last_active is None and not state.active_since(0.0)
    state.holds -= 1
    registry.release(state)
    assert KEY not in registry


def test_a_failing_expiry_callback_does_not_stop_the_others() -> None:
    clock = ManualClock()
    seen: list[SessionKey] = []

    def boom(key: SessionKey) -> None:
        seen.append(key)
        raise RuntimeError("gateway bug")

    registry = SessionRegistry(ttl_s=1.0, on_expire=boom)
    registry.touch(KEY, clock())
    registry.touch(OTHER, clock())
    clock.advance(2)
    registry.expire(clock())
    assert len(registry) == 0 and set(seen) == {KEY, OTHER}


async def test_ttl_expiry_keeps_the_history_file(tmp_path: Path) -> None:
    clock = ManualClock()
    history = SessionHistory(tmp_path / "data", fsync=False, clock=clock)
    registry = SessionRegistry(ttl_s=60.0, on_expire=history.evict)
    registry.touch(KEY, clock())
    await history.append(KEY, {"role": "user", "content": "remember me"})
    clock.advance(61)
    registry.expire(clock())
    assert KEY not in registry and KEY not in history._entries
    assert history.layout("default").history_file(KEY).exists()
    assert [m["content"] for m in await history.load(KEY)] == ["remember me"]
    assert registry.touch(KEY, clock()).status is SessionStatus.IDLE  # a fresh state


def test_a_confirmation_counts_only_within_its_window_and_expired_asks_are_dropped() -> None:
    window = ConfirmWindow(30.0)
    assert not window.confirm((KEY, "me"), 0.0)  # asks
    assert not window.confirm((KEY, "you"), 0.0)  # another member is asked separately
    assert window.confirm((KEY, "me"), 30.0)  # inside the window: confirmed, and the window closes
    assert not window.confirm((KEY, "me"), 31.0)  # asks again
    assert (KEY, "you") not in window and len(window) == 1  # the stale ask went with that call


async def test_a_state_survives_only_while_it_has_work() -> None:
    registry = SessionRegistry(ttl_s=0.0)
    state = registry.touch(KEY, 0.0)
    state.task = asyncio.create_task(asyncio.sleep(0))
    registry.expire(10.0)
    assert KEY in registry
    await state.task
    state.task = None
    registry.expire(10.0)
    assert KEY not in registry
