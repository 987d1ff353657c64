"""Failure handling per turn: retries, mid-stream errors, hangs, turn timeouts and the outermost error boundary."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import LogCapture

from agenthub import i18n
from agenthub.agent.conversion import INTERRUPTED_PLACEHOLDER
from agenthub.agent.definition import load_agents
from agenthub.clock import system_clock
from agenthub.config import Settings
from agenthub.gateway.core import CompactionPlugIn, GatewayCore
from agenthub.gateway.handle import ReplyHandle
from agenthub.gateway.session_state import SessionStatus
from agenthub.gateway.turn import OVERFLOW_AFTER_RETRY
from agenthub.hosting.app import build_gateway, build_history, build_searcher
from agenthub.llm.failures import MSG_BUSY, MSG_INTERRUPTED, MSG_TIMEOUT
from agenthub.llm.registry import ProviderRegistry
from agenthub.messages import DeltaEvent, DoneEvent, ErrorEvent, InboundMessage, ReplyEvent
from agenthub.session_keys import SessionKey
from tests.support.fakes.anthropic import (
    FakeAnthropic,
    hang,
    midstream_error,
    overloaded,
    prompt_too_long,
    rate_limited,
    reply_text,
    server_error,
)

KEY = SessionKey("default", "cli", "direct")


def _msg(text: str, **kw: Any) -> InboundMessage:
    return InboundMessage("cli", "direct", "me", text, **kw)


async def _events(handle: ReplyHandle) -> list[ReplyEvent]:
    return [e async for e in handle]


async def _next_turn_works(gw: GatewayCore, fake: FakeAnthropic) -> None:
    """The session is free and a new message in it gets a normal answer."""
    session = gw.sessions.get(KEY)
    assert session is not None and not gw.is_busy(KEY) and session.status != SessionStatus.PROCESSING
    fake.script(reply_text("back to normal"))
    final = await (await gw.submit(_msg("again"))).result()
    assert isinstance(final, DoneEvent) and final.full_text == "back to normal"


@pytest.mark.parametrize("failure", [rate_limited(retry_after_ms=1), overloaded(), server_error(500)])
async def test_a_retryable_error_then_success_is_retried(
    gateway: GatewayCore, fake_llm: FakeAnthropic, failure: Any
) -> None:
    fake_llm.script(failure, reply_text("made it"))
    events = await _events(await gateway.submit(_msg("hi")))
    assert isinstance(events[-1], DoneEvent) and events[-1].full_text == "made it"
    assert not any(isinstance(e, ErrorEvent) for e in events)
    assert len(fake_llm.message_requests()) == 2
    history = await gateway.history.load(KEY)
    assert [(m["role"], m["content"]) for m in history] == [("user", "hi"), ("assistant", "made it")]


async def test_retries_exhausted_end_the_turn_with_a_clear_message(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    async with build_gateway(settings_factory(llm={"max_retries": 1})) as gw:
        fake_llm.script(server_error(500), overloaded())
        final = await (await gw.submit(_msg("hi"))).result()
        assert isinstance(final, ErrorEvent) and final.code == "llm_error"
        assert final.message == MSG_BUSY.render("en")
        assert len(fake_llm.message_requests()) == 2
        await _next_turn_works(gw, fake_llm)


async def test_midstream_error_after_text_ends_the_turn_and_releases_the_lock(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(midstream_error("Half an ans"))
    events = await _events(await gateway.submit(_msg("question")))
    assert "".join(e.text for e in events if isinstance(e, DeltaEvent)) == "Half an ans"
    final = events[-1]
    assert isinstance(final, ErrorEvent) and final.message == MSG_INTERRUPTED.render("en")
    assert "overloaded_error" not in final.message and "Error code" not in final.message
    assert len(fake_llm.message_requests()) == 1  # text already reached the user: never silently re-asked
    session = gateway.sessions.get(KEY)
    assert session is not None and session.status == SessionStatus.ERROR
    await _next_turn_works(gateway, fake_llm)
    history = await gateway.history.load(KEY)
    assert [(m["role"], m["content"]) for m in history] == [
        ("user", "question"),
        ("user", "again"),
        ("assistant", "back to normal"),
    ]
    # the unanswered question and the new one stay separate requests: a placeholder reply sits between them
    last = fake_llm.message_requests()[-1].body
    assert last is not None and [m["role"] for m in last["messages"]] == ["user", "assistant", "user"]
    assert last["messages"][1]["content"] == INTERRUPTED_PLACEHOLDER


async def test_midstream_error_before_any_text_is_retried(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(midstream_error(""), reply_text("second try"))
    final = await (await gateway.submit(_msg("hi"))).result()
    assert isinstance(final, DoneEvent) and final.full_text == "second try"
    assert len(fake_llm.message_requests()) == 2


async def test_a_hung_model_call_times_out_with_a_clear_message(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    async with build_gateway(settings_factory(llm={"timeout_s": 0.3, "max_retries": 0})) as gw:
        fake_llm.script(hang())
        final = await (await gw.submit(_msg("hello?"))).result()
        assert isinstance(final, ErrorEvent) and final.message == MSG_TIMEOUT.render("en")
        request = fake_llm.message_requests()[0]
        await asyncio.wait_for(request.disconnected.wait(), 2)
        await _next_turn_works(gw, fake_llm)


async def test_lock_timeout_cancels_the_hung_turn_and_tells_the_user(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, log_capture: LogCapture
) -> None:
    async with build_gateway(settings_factory(session={"lock_timeout_s": 1.0})) as gw:
        fake_llm.script(hang())
        handle = await gw.submit(_msg("this will hang"))
        [request] = await fake_llm.wait_for_requests(1)
        final = await asyncio.wait_for(handle.result(), 10)  # the turn's own time limit ends it, nothing else
        assert isinstance(final, ErrorEvent) and final.code == "timeout"
        assert final.message == i18n.text("abort.timeout", "en")
        await asyncio.wait_for(request.disconnected.wait(), 2)
        session = gw.sessions.get(KEY)
        assert session is not None and session.status == SessionStatus.ERROR
        assert gw.stats.aborted == 1
        assert [e["limit_s"] for e in log_capture.entries if e["event"] == "session_lock_timeout"] == [1.0]
        await _next_turn_works(gw, fake_llm)
        assert gw.sessions.get(KEY).status == SessionStatus.IDLE  # type: ignore[union-attr]


async def test_per_agent_lock_timeout_applies(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, tmp_path: Any
) -> None:
    from tests.support.agents import write_agent

    settings = settings_factory()  # the session default stays 120 s: only the agent's 1 s can end this turn
    write_agent(settings.agents_dir, "quick", {"lock_timeout_s": 1})
    async with build_gateway(settings) as gw:
        fake_llm.script(hang())
        handle = await gw.submit(_msg("hang", agent="quick"))
        await fake_llm.wait_for_requests(1)
        final = await asyncio.wait_for(handle.result(), 10)
        assert isinstance(final, ErrorEvent) and final.code == "timeout"


async def test_queued_message_runs_after_a_timed_out_turn(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    async with build_gateway(settings_factory(session={"lock_timeout_s": 1.0})) as gw:
        fake_llm.script(hang(), reply_text("second answered"))
        first = await gw.submit(_msg("first"))
        second = await gw.submit(_msg("second"))  # waits behind the hung turn
        await fake_llm.wait_for_requests(1)
        assert not second.finished
        final_first = await asyncio.wait_for(first.result(), 10)
        assert isinstance(final_first, ErrorEvent) and final_first.code == "timeout"
        final = await asyncio.wait_for(second.result(), 10)
        assert isinstance(final, DoneEvent) and final.full_text == "second answered"
        second_request = fake_llm.message_requests()[1].body
        assert second_request is not None and "second" in str(second_request["messages"][-1])


def compacting_gateway(settings: Settings, compaction: CompactionPlugIn | None) -> GatewayCore:
    """A gateway whose turns are given the compactor `compaction` builds (None: no memory layer)."""
    agents = load_agents(settings.agents_dir, default_agent=settings.default_agent)
    history = build_history(settings, system_clock, None)
    return GatewayCore(
        settings,
        agents=agents,
        providers=ProviderRegistry.from_settings(settings.llm),
        history=history,
        search=build_searcher(settings, None, history),
        compaction=compaction,
    )


async def test_context_overflow_without_compactor_says_what_to_do(settings: Settings, fake_llm: FakeAnthropic) -> None:
    async with compacting_gateway(settings, None) as gateway:
        fake_llm.script(prompt_too_long())
        final = await (await gateway.submit(_msg("huge"))).result()
        assert isinstance(final, ErrorEvent) and final.message == OVERFLOW_AFTER_RETRY.render("en")
        assert len(fake_llm.message_requests()) == 1
        await _next_turn_works(gateway, fake_llm)


async def test_overflow_compacts_once_and_retries(settings: Settings, fake_llm: FakeAnthropic) -> None:
    calls: list[str] = []

    class Compactor:
        async def compact(
            self, key: SessionKey, agent: Any, *, reason: str, actor: str, focus: str = "", locale: str | None = None
        ) -> str:
            calls.append(reason)
            return "compacted"

    async with compacting_gateway(settings, lambda gateway: Compactor()) as gateway:
        fake_llm.script(prompt_too_long(), reply_text("fits now"))
        final = await (await gateway.submit(_msg("long"))).result()
        assert isinstance(final, DoneEvent) and final.full_text == "fits now"
    assert calls == ["overflow"]


async def test_unexpected_failure_is_logged_with_the_key_and_not_shown_raw(
    gateway: GatewayCore, fake_llm: FakeAnthropic, log_capture: LogCapture
) -> None:
    # a directory where the history file should be: appending raises IsADirectoryError inside the turn
    history_file = gateway.history.layout("default").history_file(KEY)
    history_file.mkdir(parents=True)
    final = await (await gateway.submit(_msg("hi", message_id="msg-12345678"))).result()
    assert isinstance(final, ErrorEvent) and final.code == "internal"
    assert "12345678" in final.message and "went wrong" in final.message
    assert "IsADirectory" not in final.message and str(history_file) not in final.message
    assert fake_llm.message_requests() == []
    [entry] = [e for e in log_capture.entries if e["event"] == "turn_failed"]
    assert entry["session_key"] == "default:cli:direct" and entry["exc_info"] is True
    assert entry["log_level"] == "error"
    assert not gateway.is_busy(KEY)
    history_file.rmdir()
    await _next_turn_works(gateway, fake_llm)


async def test_a_failing_after_turn_hook_does_not_break_the_session(
    gateway: GatewayCore, fake_llm: FakeAnthropic, log_capture: LogCapture
) -> None:
    seen: list[str] = []
    both_ran = asyncio.Event()

    async def broken(pending: Any, outcome: Any) -> None:
        seen.append(outcome.code)
        if len(seen) == 2:
            both_ran.set()
        raise RuntimeError("hook bug")

    gateway.after_turn_hooks.append(broken)
    assert isinstance(await (await gateway.submit(_msg("one"))).result(), DoneEvent)
    await _next_turn_works(gateway, fake_llm)
    await asyncio.wait_for(both_ran.wait(), 2)
    assert seen == ["ok", "ok"]
    assert [e["event"] for e in log_capture.entries].count("after_turn_hook_failed") == 2
