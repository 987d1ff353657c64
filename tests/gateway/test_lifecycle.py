"""GatewayCore's lifecycle: start/stop of timers and providers, shutdown of running turns, TTL, offline mode."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from agenthub.clock import ManualClock
from agenthub.config import Settings
from agenthub.gateway.timers import TimerRegistry
from agenthub.hosting.app import build_gateway
from agenthub.llm.anthropic_provider import AnthropicProvider
from agenthub.messages import DeltaEvent, DoneEvent, ErrorEvent, InboundMessage
from agenthub.session_keys import SessionKey
from tests.support.fakes.anthropic import FakeAnthropic, hang, last_user_text
from tests.support.roots import make_settings

KEY = SessionKey("default", "cli", "direct")


def _msg(text: str, chat: str = "direct") -> InboundMessage:
    return InboundMessage("cli", chat, "me", text)


async def test_enter_starts_timers_and_exit_stops_them_and_closes_providers(settings: Settings) -> None:
    gw = build_gateway(settings)
    assert not gw.timers["session_sweep"].started
    async with gw:
        assert gw.timers["session_sweep"].started
        provider = gw.providers.default
        assert isinstance(provider, AnthropicProvider)
        with pytest.raises(RuntimeError, match="already started"):
            await gw.__aenter__()
    assert not gw.timers["session_sweep"].started
    assert provider.closed
    late = await (await gw.submit(_msg("too late"))).result()
    assert isinstance(late, ErrorEvent) and late.code == "shutdown"


async def test_exit_aborts_running_and_queued_turns(settings: Settings, fake_llm: FakeAnthropic) -> None:
    fake_llm.responder = lambda body: hang() if "hangs" in last_user_text(body) else None
    async with build_gateway(settings) as gw:
        running = await gw.submit(_msg("hangs"))
        queued = await gw.submit(_msg("waits"))
        other = await gw.submit(_msg("elsewhere", chat="other"))
        assert isinstance(await other.result(), DoneEvent)
        await fake_llm.wait_for_requests(2)
    for handle in (running, queued):
        final = await asyncio.wait_for(handle.result(), 2)
        assert isinstance(final, ErrorEvent) and final.code == "shutdown"
    hung = next(r for r in fake_llm.message_requests() if r.body and "hangs" in str(r.body["messages"]))
    await asyncio.wait_for(hung.disconnected.wait(), 2)
    assert len(fake_llm.message_requests()) == 2  # the queued message never reached the model


async def test_drain_waits_for_running_turns_and_refuses_new_ones(settings: Settings, fake_llm: FakeAnthropic) -> None:
    fake_llm.first_byte_delay_s = 0.1
    async with build_gateway(settings) as gw:
        first = await gw.submit(_msg("one"))
        assert await gw.drain(5.0)
        assert first.finished and isinstance(await first.result(), DoneEvent)
        refused = await (await gw.submit(_msg("two"))).result()
        assert isinstance(refused, ErrorEvent) and refused.code == "shutdown"


async def test_drain_reports_turns_still_running(settings: Settings, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(hang())
    async with build_gateway(settings) as gw:
        await gw.submit(_msg("hangs"))
        await fake_llm.wait_for_requests(1)
        assert not await gw.drain(0.05)


async def test_idle_session_expires_but_history_stays(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    clock = ManualClock()
    async with build_gateway(settings_factory(session={"ttl_s": 60}), clock=clock) as gw:
        assert isinstance(await (await gw.submit(_msg("hello"))).result(), DoneEvent)
        clock.advance(30)
        await gw.timers["session_sweep"].tick_now()
        assert gw.sessions.get(KEY) is not None
        clock.advance(31)
        await gw.timers["session_sweep"].tick_now()
        assert gw.sessions.get(KEY) is None
        assert isinstance(await (await gw.submit(_msg("back"))).result(), DoneEvent)
        assert [m["content"] for m in await gw.history.load(KEY)][::2] == ["hello", "back"]
    assert len(fake_llm.message_requests()[1].body["messages"]) == 3  # type: ignore[index]


async def test_timers_survive_failing_ticks_and_stop_in_reverse_order() -> None:
    registry = TimerRegistry()
    order: list[str] = []
    ticked = asyncio.Event()

    async def failing() -> None:
        ticked.set()
        raise RuntimeError("tick bug")

    async def fine() -> None:
        return None

    bad = registry.add("bad", 0.01, failing)
    await registry.start()
    late = registry.add("late", 3600, fine)
    assert late.started
    await asyncio.wait_for(ticked.wait(), 2)
    await bad.tick_now()
    assert bad.failures >= 2 and bad.started
    with pytest.raises(ValueError, match="already registered"):
        registry.add("bad", 1, fine)
    original_stops = {name: registry[name].stop for name in ("bad", "late")}
    for name, stop in original_stops.items():

        async def recording_stop(name: str = name, stop: Callable[[], object] = stop) -> None:
            order.append(name)
            await stop()  # type: ignore[misc]

        registry[name].stop = recording_stop  # type: ignore[method-assign]
    await registry.stop()
    assert order == ["late", "bad"]
    assert not bad.started and not late.started


async def test_without_a_key_the_offline_provider_answers(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    async with build_gateway(settings) as gw:
        assert gw.providers.is_offline
        events = [e async for e in await gw.submit(_msg("hello offline"))]
    final = events[-1]
    assert isinstance(final, DoneEvent) and "offline" in final.full_text.lower()
    assert "ANTHROPIC_API_KEY" in final.full_text
    assert len([e for e in events if isinstance(e, DeltaEvent)]) >= 2


async def test_a_missed_submit_consumer_loses_nothing(settings: Settings, fake_llm: FakeAnthropic) -> None:
    async with build_gateway(settings) as gw:
        handle = await gw.submit(_msg("nobody listens yet"))
        await handle.result()
        events = [e async for e in handle]
    assert isinstance(events[-1], DoneEvent)
    assert "".join(e.text for e in events if isinstance(e, DeltaEvent)) == events[-1].full_text
