"""After a failed L2 summary a session waits (time or growth) before the next try, and the flush is not repeated."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from structlog.testing import capture_logs

from agenthub.clock import ManualClock
from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway
from agenthub.memory.wiring import AUTOCOMPACT_TIMER
from agenthub.messages import DoneEvent
from agenthub.session_keys import SessionKey
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, ScriptedReply, http_error, reply_text
from tests.support.memory import chat_memory_file, is_l3_request, is_summary_request, msg, seed, settle

OVER = {"input_tokens": 6000}


def _failing_summaries(body: dict[str, Any]) -> ScriptedReply:
    """Every summary call fails; memory flushes succeed; every turn reports a prompt over the threshold."""
    if is_summary_request(body):
        return http_error(400, "summary refused")
    if is_l3_request(body):
        return reply_text("- a durable fact\n")
    return reply_text("ok", usage=OVER)


def _settings(settings_factory: Callable[..., Settings], **memory: Any) -> Settings:
    settings = settings_factory(memory=memory) if memory else settings_factory()
    write_agent(settings.agents_dir, "default", {"memory": {"consolidate_at_tokens": 5000}})
    return settings


def _summaries(fake: FakeAnthropic) -> list[RecordedRequest]:
    return [r for r in fake.message_requests() if is_summary_request(r.body or {})]


def _flushes(fake: FakeAnthropic) -> list[RecordedRequest]:
    return [r for r in fake.message_requests() if is_l3_request(r.body or {})]


async def _turn(gw: GatewayCore, key: SessionKey, text: str) -> None:
    assert isinstance(await (await gw.submit(msg(text))).result(), DoneEvent)
    await settle(gw, key)


async def test_a_failed_summary_waits_for_the_retry_time_and_the_retry_flushes_only_new_messages(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    clock = ManualClock()
    fake_llm.responder = _failing_summaries
    async with build_gateway(_settings(settings_factory), clock=clock) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 20)
        await _turn(gw, key, "turn 1")
        assert (len(_summaries(fake_llm)), len(_flushes(fake_llm))) == (1, 1)

        with capture_logs() as logs:
            await _turn(gw, key, "turn 2")
            clock.advance(599)
            await _turn(gw, key, "turn 3")
        assert (len(_summaries(fake_llm)), len(_flushes(fake_llm))) == (1, 1)  # no summary, no flush paid for
        assert [e["event"] for e in logs].count("consolidation_deferred") == 1  # once per skip window
        assert not any(e["event"] == "consolidation_triggered" for e in logs)

        clock.advance(1)
        await _turn(gw, key, "turn 4")
        assert len(_summaries(fake_llm)) == 2
        flushes = _flushes(fake_llm)
        assert len(flushes) == 2
        first, retry = str(flushes[0].body), str(flushes[1].body)
        assert "question 0" in first and "question 10" in first
        # the retry's head starts with the head flushed before: only the messages after it are flushed
        assert "question 10" not in retry and "question 11" in retry and "question 13" in retry
        assert len(await gw.history.load(key)) == 48  # a failed summary never changes the history


async def test_ten_more_messages_end_the_wait_early(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    fake_llm.responder = _failing_summaries
    async with build_gateway(_settings(settings_factory), clock=ManualClock()) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 20)
        for i in range(1, 6):  # 42 messages at the failure, 50 after turn 5
            await _turn(gw, key, f"turn {i}")
        assert len(_summaries(fake_llm)) == 1
        await _turn(gw, key, "turn 6")  # 52: ten more than at the failure
        assert len(_summaries(fake_llm)) == 2


async def test_zero_disables_the_wait(settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic) -> None:
    fake_llm.responder = _failing_summaries
    settings = _settings(settings_factory, consolidate_retry_after_s=0)
    async with build_gateway(settings, clock=ManualClock()) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 20)
        await _turn(gw, key, "turn 1")
        await _turn(gw, key, "turn 2")
        assert len(_summaries(fake_llm)) == 2


async def test_compact_after_a_failed_summary_runs_at_once_without_flushing_the_same_messages_again(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    fake_llm.responder = _failing_summaries
    async with build_gateway(_settings(settings_factory), clock=ManualClock()) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 20)
        await _turn(gw, key, "turn 1")
        fake_llm.responder = lambda body: reply_text("summary: project X") if is_summary_request(body) else None
        with capture_logs() as logs:
            final = await (await gw.submit(msg("/compact"))).result()
        assert isinstance(final, DoneEvent) and final.full_text.startswith("Compacted: 22 earlier messages")
        assert len(_summaries(fake_llm)) == 2 and len(_flushes(fake_llm)) == 1  # a user's /compact never waits
        assert any(e["event"] == "memory_flush_skipped_already_flushed" for e in logs)
        assert (await gw.history.load(key))[0]["content"] == "[历史摘要]\nsummary: project X"

        fake_llm.responder = _failing_summaries  # after a success the backoff is forgotten: the next failure counts
        await seed(gw, key, 20, start=100)
        await _turn(gw, key, "turn 2")
        assert len(_summaries(fake_llm)) == 3 and len(_flushes(fake_llm)) == 2


async def test_autocompact_waits_after_a_failed_summary_too(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    clock = ManualClock(time.time())  # the idle check compares the clock with file times
    settings = settings_factory()
    write_agent(settings.agents_dir, "default", {"memory": {"autocompact_summary": True}})
    fake_llm.responder = _failing_summaries
    async with build_gateway(settings, clock=clock) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 60)
        then = time.time() - 1200
        os.utime(gw.history.layout("default").history_file(key), (then, then))
        timer = gw.timers[AUTOCOMPACT_TIMER]

        await timer.tick_now()
        assert (len(_summaries(fake_llm)), len(_flushes(fake_llm))) == (1, 1)
        with capture_logs() as logs:
            await timer.tick_now()
        assert (len(_summaries(fake_llm)), len(_flushes(fake_llm))) == (1, 1)
        assert any(e["event"] == "consolidation_deferred" for e in logs)
        clock.advance(600)
        await timer.tick_now()
        assert (len(_summaries(fake_llm)), len(_flushes(fake_llm))) == (2, 1)  # same head: flushed once only
        assert len(await gw.history.load(key)) == 120


async def test_restart_forgets_the_wait(settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic) -> None:
    fake_llm.responder = _failing_summaries
    async with build_gateway(_settings(settings_factory), clock=ManualClock()) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 20)
        await _turn(gw, key, "turn 1")
        for _ in range(2):
            assert isinstance(await (await gw.submit(msg("/restart"))).result(), DoneEvent)
        await seed(gw, key, 19, start=200)  # a new conversation, shorter than the one that failed
        await _turn(gw, key, "turn 2")
        assert len(_summaries(fake_llm)) == 2


async def test_a_flush_whose_rewrite_was_refused_is_tried_again_on_the_retry(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    fake_llm.responder = _failing_summaries  # the flush answers one short line: the shrink guard refuses it
    async with build_gateway(_settings(settings_factory), clock=ManualClock()) as gw:
        key = gw.resolve_key(msg("x"))[1]
        memory = chat_memory_file(gw, gw.agents.get("default"), key)
        memory.parent.mkdir(parents=True, exist_ok=True)
        memory.write_text("- a long-standing fact\n" * 100, encoding="utf-8")
        await seed(gw, key, 20)
        with capture_logs() as logs:
            await _turn(gw, key, "turn 1")
        assert any(e["event"] == "memory_rewrite_refused" for e in logs)
        fake_llm.responder = lambda body: reply_text("summary: project X") if is_summary_request(body) else None
        with capture_logs() as logs:
            final = await (await gw.submit(msg("/compact"))).result()
        assert isinstance(final, DoneEvent)
        assert len(_flushes(fake_llm)) == 2  # nothing reached MEMORY.md the first time: the same head is flushed again
        assert not any(e["event"] == "memory_flush_skipped_already_flushed" for e in logs)
