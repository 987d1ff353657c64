"""The prompt cache through the gateway (design §15), against a fake model with Anthropic's prefix cache: a long
chat never breaks, each break is named (restart, compaction, model, TTL, memory), /status and /metrics show it,
and an addition to MEMORY.md rides as a note instead of re-writing the conversation's cache."""

from __future__ import annotations

from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import pytest_asyncio
from structlog.testing import capture_logs

from agenthub.agent.memory_notes import NOTE_HEADER
from agenthub.clock import ManualClock
from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent, InboundMessage
from agenthub.web import render_metrics
from tests.support.cache_chat import TARGET, long_chat
from tests.support.fakes.anthropic import FakeAnthropic, reply_text, reply_tool
from tests.support.fakes.prompt_cache import PromptCache
from tests.support.memory import msg, seed, summaries_then_default

Cached = tuple[GatewayCore, ManualClock, FakeAnthropic]


@pytest_asyncio.fixture
async def cached(settings: Settings, fake_llm: FakeAnthropic) -> AsyncIterator[Cached]:
    clock = ManualClock()
    fake_llm.prompt_cache = PromptCache(clock=clock, min_tokens=0)
    fake_llm.responder = summaries_then_default()
    async with build_gateway(settings, clock=clock) as gw:
        yield gw, clock, fake_llm


async def _say(gw: GatewayCore, text: str, **kw: Any) -> str:
    final = await (await gw.submit(InboundMessage("cli", "c1", "u1", text, **kw))).result()
    assert isinstance(final, DoneEvent), final
    return final.full_text


async def _chat(cached: Cached, turns: int, gap_s: float = 30.0) -> None:
    gw, clock, _ = cached
    for i in range(turns):
        await _say(gw, f"question {i}")
        clock.advance(gap_s)


def _breaks(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == "prompt_cache_break"]


def _system(body: dict[str, Any]) -> str:
    return "\n".join(str(b.get("text", "")) for b in body.get("system") or [])


async def test_a_long_chat_never_breaks_and_status_shows_its_hit_rate(cached: Cached) -> None:
    gw = cached[0]
    with capture_logs() as logs:
        await _chat(cached, 6)
    assert _breaks(logs) == [] and sum(gw.cache_watch.breaks.values()) == 0
    read, total = gw.cache_watch.hit_rate("default:cli:c1") or (0, 0)
    assert 0.5 < read / total < 1
    status = await _say(gw, "/status")
    assert f"prompt cache hit rate (recent model calls): {round(100 * read / total)}%" in status


async def test_status_shows_the_hit_rate_in_the_chats_locale(cached: Cached) -> None:
    gw, clock, _ = cached
    for text in ("第一个问题", "第二个问题"):
        assert isinstance(await (await gw.submit(InboundMessage("wecom", "g1", "alice", text))).result(), DoneEvent)
        clock.advance(30)
    status = await (await gw.submit(InboundMessage("wecom", "g1", "alice", "/status"))).result()  # zh-CN by default
    assert isinstance(status, DoneEvent) and "提示缓存命中率（最近的模型调用）：" in status.full_text


async def test_restart_is_named_and_counted(cached: Cached) -> None:
    gw = cached[0]
    await _chat(cached, 3)
    with capture_logs() as logs:
        await _say(gw, "/restart")
        await _say(gw, "/restart")
        await _say(gw, "a fresh start")
    [found] = _breaks(logs)
    assert (found["cause"], found["reason"], found["matched_messages"]) == ("messages_changed", "restart", 0)
    assert 'agenthub_prompt_cache_breaks_total{cause="messages_changed"} 1' in render_metrics(gw)


async def test_a_compaction_is_named(cached: Cached) -> None:
    gw = cached[0]
    await seed(gw, gw.resolve_key(msg("x"))[1], 25)
    await _chat(cached, 2)
    with capture_logs() as logs:
        assert "summar" in (await _say(gw, "/compact")).lower()
        await _say(gw, "after the summary")
    [found] = _breaks(logs)
    assert (found["cause"], found["reason"]) == ("messages_changed", "compaction")


async def test_a_model_change_and_an_expired_cache_are_named(cached: Cached) -> None:
    gw, clock, _ = cached
    await _chat(cached, 2)
    with capture_logs() as logs:
        await _say(gw, "use the other model", model_hint="claude-other-model")
        clock.advance(301)
        await _say(gw, "back after a break")
    assert [b["cause"] for b in _breaks(logs)] == ["model_changed", "ttl_expired"]


async def test_a_memory_addition_rides_as_a_note_and_breaks_nothing(cached: Cached) -> None:
    gw, clock, fake = cached
    memory = gw.settings.data_dir / "default" / "memory" / "MEMORY.md"
    memory.parent.mkdir(parents=True, exist_ok=True)
    memory.write_text("- likes tea\n", encoding="utf-8")
    await _chat(cached, 2)
    with capture_logs() as logs:
        fake.script(reply_tool("write_memory", {"content": "- prefers green tea"}), reply_text("noted"))
        await _say(gw, "remember: green tea")
        clock.advance(30)
        await _say(gw, "what do I like?")
        clock.advance(30)
        await _say(gw, "and again?")
    assert _breaks(logs) == []
    bodies = [r.body or {} for r in fake.message_requests()][-3:]  # the turn after the write, and the one after
    assert all("likes tea" in _system(b) and "green tea" not in _system(b) for b in bodies)
    noted = bodies[1]["messages"][-1]["content"]
    assert noted[-1]["text"] == f"{NOTE_HEADER}\n\n- prefers green tea"
    assert bodies[2]["messages"][len(bodies[1]["messages"]) - 1]["content"][-1]["text"] == noted[-1]["text"]
    assert memory.read_text(encoding="utf-8") == "- likes tea\n- prefers green tea\n"


async def test_a_memory_rewrite_or_a_cold_cache_shows_the_file_as_it_is(cached: Cached) -> None:
    gw, clock, fake = cached
    memory = gw.settings.data_dir / "default" / "memory" / "MEMORY.md"
    memory.parent.mkdir(parents=True, exist_ok=True)
    memory.write_text("- likes tea\n", encoding="utf-8")
    await _chat(cached, 2)
    memory.write_text("- likes coffee\n", encoding="utf-8")  # not an addition (L3, a forget): never kept back
    with capture_logs() as logs:
        await _say(gw, "what do I like?")
    [found] = _breaks(logs)
    assert (found["cause"], found["block"]) == ("system_changed", "memory")
    assert "likes coffee" in _system(fake.message_requests()[-1].body or {})
    memory.write_text("- likes coffee\n- and cake\n", encoding="utf-8")
    clock.advance(301)  # the cache is gone anyway: the system prompt takes the file again, no note
    await _say(gw, "and now?")
    last = fake.message_requests()[-1].body or {}
    assert "and cake" in _system(last) and NOTE_HEADER not in str(last["messages"])


async def test_another_chat_does_not_disturb_a_chat(cached: Cached) -> None:
    gw = cached[0]
    with capture_logs() as logs:
        await _chat(cached, 2)
        await (await gw.submit(msg("hello", chat="c2"))).result()
        await _say(gw, "still here")
    assert _breaks(logs) == []


async def test_a_long_chat_with_two_memory_writes_reads_nine_tenths_from_the_cache(fake_llm: FakeAnthropic) -> None:
    """The bench figure (bench/bench_cache.py): 30 turns, a write_memory append at turns 10 and 20."""
    totals, breaks, _ = await long_chat(30, 60.0, memory_notes=True)
    share = totals.usage.cache_read_input_tokens / totals.usage.prompt_tokens
    assert share >= TARGET and breaks == {}
    before, before_breaks, _ = await long_chat(30, 60.0, memory_notes=False)
    assert before_breaks == {"system_changed": 2}  # each write re-wrote the conversation's cache
    assert before.usage.cache_creation_input_tokens > 1.5 * totals.usage.cache_creation_input_tokens
