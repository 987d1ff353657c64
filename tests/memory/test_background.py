"""L2 runs in the background: the chat goes on meanwhile, /restart, /stop and shutdown abort it, its calls time out."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from structlog.testing import capture_logs

from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent
from agenthub.session_keys import SessionKey
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, hang, reply_text
from tests.support.memory import is_summary_request, msg, seed, settle

SUMMARY = "用户在做项目 X；决定用 PostgreSQL；未完成：部署。"
OVER = {"input_tokens": 6000}
BOUND_S = 10.0
"""Only a bound for the old, blocking behaviour to fail instead of hanging; nothing is timed."""


def _settings(settings_factory: Callable[..., Settings], **memory: Any) -> Settings:
    # a hung call must not end by the read timeout here: only the behaviour under test may end it
    settings = settings_factory(memory={"flush_before_compaction": False, **memory}, llm={"timeout_s": 60.0})
    write_agent(settings.agents_dir, "default", {"memory": {"consolidate_at_tokens": 5000}})
    return settings


def _held_summary(fake_llm: FakeAnthropic, release: asyncio.Event) -> None:
    fake_llm.responder = lambda body: reply_text(SUMMARY, hold=release) if is_summary_request(body) else None


async def _start_consolidation(gw: GatewayCore, fake_llm: FakeAnthropic) -> tuple[SessionKey, RecordedRequest]:
    """20 seeded exchanges, then a turn over the threshold; returns once the summary call is in flight."""
    key = gw.resolve_key(msg("x"))[1]
    await seed(gw, key, 20)
    fake_llm.script(reply_text("first answer", usage=OVER))
    assert isinstance(await (await gw.submit(msg("turn one"))).result(), DoneEvent)
    requests = await fake_llm.wait_for_requests(2)
    assert is_summary_request(requests[1].body or {})
    return key, requests[1]


async def _say(gw: GatewayCore, text: str) -> DoneEvent:
    final = await asyncio.wait_for((await gw.submit(msg(text))).result(), BOUND_S)
    assert isinstance(final, DoneEvent), final
    return final


async def test_the_next_message_does_not_wait_and_what_it_adds_is_kept(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    release = asyncio.Event()
    _held_summary(fake_llm, release)
    async with build_gateway(_settings(settings_factory)) as gw:
        key, summary_call = await _start_consolidation(gw, fake_llm)
        assert not gw.is_busy(key)  # the summary runs beside the chat, not in its queue
        assert (await _say(gw, "turn two")).full_text.startswith("reply to: turn two")
        assert not summary_call.completed.is_set()  # answered while the summary was still being written
        release.set()
        await settle(gw, key)
        history = await gw.history.load(key)
        assert history[0]["role"] == "system" and SUMMARY in history[0]["content"]
        assert history[-2]["content"] == "turn two"  # appended meanwhile: kept after the tail
        assert history[-1]["role"] == "assistant"
        archived = await gw.history.archived(key)
        assert archived[0]["content"] == "question 0"
        assert len(archived) + len(history) - 1 == 44  # nothing lost, nothing doubled


async def test_restart_aborts_a_running_compaction_at_once(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    fake_llm.responder = lambda body: hang() if is_summary_request(body) else None
    async with build_gateway(_settings(settings_factory)) as gw:
        key, summary_call = await _start_consolidation(gw, fake_llm)
        assert "again within" in (await _say(gw, "/restart")).full_text
        assert "starts fresh" in (await _say(gw, "/restart")).full_text
        await asyncio.wait_for(summary_call.disconnected.wait(), BOUND_S)  # the model call itself is aborted
        await settle(gw, key)
        assert await gw.history.load(key) == []


async def test_stop_aborts_a_running_compaction_and_keeps_the_history(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    fake_llm.responder = lambda body: hang() if is_summary_request(body) else None
    async with build_gateway(_settings(settings_factory)) as gw:
        key, summary_call = await _start_consolidation(gw, fake_llm)
        before = await gw.history.load(key)
        assert "compaction" in (await _say(gw, "/stop")).full_text
        await asyncio.wait_for(summary_call.disconnected.wait(), BOUND_S)
        await settle(gw, key)
        assert await gw.history.load(key) == before and len(before) == 42
        assert not gw.history.layout("default").archive_file(key).exists()


async def test_shutdown_aborts_a_running_compaction(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    fake_llm.responder = lambda body: hang() if is_summary_request(body) else None
    async with build_gateway(_settings(settings_factory)) as gw:
        key, summary_call = await _start_consolidation(gw, fake_llm)
    assert summary_call.disconnected.is_set()
    gw.history.evict(key)
    assert len(await gw.history.load(key)) == 42


async def test_each_background_model_call_has_its_own_timeout(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    fake_llm.responder = lambda body: hang() if is_summary_request(body) else None
    settings = _settings(settings_factory, background_timeout_s=0.2)
    async with build_gateway(settings) as gw:
        with capture_logs() as logs:
            key, summary_call = await _start_consolidation(gw, fake_llm)
            await asyncio.wait_for(settle(gw, key), BOUND_S)
        await asyncio.wait_for(summary_call.disconnected.wait(), BOUND_S)
        assert any(e["event"] == "consolidation_failed" for e in logs)
        assert len(await gw.history.load(key)) == 42


async def test_at_most_one_compaction_runs_per_session(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    release = asyncio.Event()
    _held_summary(fake_llm, release)
    async with build_gateway(_settings(settings_factory)) as gw:
        key, _ = await _start_consolidation(gw, fake_llm)
        fake_llm.script(reply_text("second answer", usage=OVER))
        await _say(gw, "turn two")  # over the threshold again while the first compaction runs
        release.set()
        await settle(gw, key)
        assert len([r for r in fake_llm.message_requests() if is_summary_request(r.body or {})]) == 1


async def test_compact_while_a_background_compaction_runs_says_so(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    release = asyncio.Event()
    _held_summary(fake_llm, release)
    async with build_gateway(_settings(settings_factory)) as gw:
        key, _ = await _start_consolidation(gw, fake_llm)
        assert "already running" in (await _say(gw, "/compact")).full_text
        release.set()
        await settle(gw, key)
        assert len([r for r in fake_llm.message_requests() if is_summary_request(r.body or {})]) == 1
