"""L2 consolidation through the gateway, the real SDK and the fake Anthropic server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from agenthub.config import Settings
from agenthub.gateway.turn import OVERFLOW_AFTER_RETRY
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent, ErrorEvent, NoticeEvent
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, http_error, prompt_too_long, reply_text
from tests.support.memory import (
    chat_memory_file,
    conversation,
    is_summary_request,
    msg,
    seed,
    settle,
    summaries_then_default,
    system_text,
)

SUMMARY = "用户在做项目 X；决定用 PostgreSQL；未完成：部署。"
OVER = {"input_tokens": 6000}


def _settings(settings_factory: Callable[..., Settings], **agents: dict[str, Any]) -> Settings:
    settings = settings_factory()
    for name, config in agents.items():
        write_agent(settings.agents_dir, name, config)
    return settings


async def test_crossing_the_threshold_consolidates_and_next_request_carries_the_summary(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = _settings(settings_factory, default={"memory": {"consolidate_at_tokens": 5000}})
    fake_llm.responder = summaries_then_default(SUMMARY)
    async with build_gateway(settings) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 20)
        fake_llm.script(reply_text("first answer", usage=OVER))
        assert isinstance(await (await gw.submit(msg("turn one"))).result(), DoneEvent)
        await settle(gw, key)

        history = await gw.history.load(key)
        assert len(history) == 21
        assert history[0]["role"] == "system" and history[0]["content"].startswith("[历史摘要]")
        assert SUMMARY in history[0]["content"]
        archived = await gw.history.archived(key)
        assert len(archived) == 22
        assert [m["content"] for m in archived[:2]] == ["question 0", "answer 0"]
        assert len(archived) + len(conversation(history)) == 42  # nothing lost

        summary_calls = [r for r in fake_llm.message_requests() if is_summary_request(r.body or {})]
        assert len(summary_calls) == 1
        assert "question 0" in str(summary_calls[0].body)

        events = [e async for e in await gw.submit(msg("turn two"))]
        notices = [e.text for e in events if isinstance(e, NoticeEvent)]
        assert len(notices) == 1 and "22 earlier messages were summarised" in notices[0]  # never silent
        last = fake_llm.message_requests()[-1].body or {}
        assert not is_summary_request(last) and SUMMARY in system_text(last)
        assert all(m["role"] != "system" for m in last["messages"])


async def test_below_the_threshold_nothing_happens(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = _settings(settings_factory, default={"memory": {"consolidate_at_tokens": 5000}})
    async with build_gateway(settings) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 20)
        fake_llm.script(reply_text("fine", usage={"input_tokens": 4999}))
        await (await gw.submit(msg("hello"))).result()
        await settle(gw, key)
        assert len(await gw.history.load(key)) == 42
        assert len(fake_llm.message_requests()) == 1


async def test_a_per_agent_override_changes_only_that_agent(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = _settings(settings_factory, low={"memory": {"consolidate_at_tokens": 5000}}, plain={}, default={})
    fake_llm.responder = summaries_then_default()
    async with build_gateway(settings) as gw:
        for agent in ("low", "plain"):
            key = gw.resolve_key(msg("x", agent=agent))[1]
            await seed(gw, key, 20)
            fake_llm.script(reply_text("ok", usage=OVER))
            await (await gw.submit(msg("go", agent=agent))).result()
            await settle(gw, key)
        low = await gw.history.load(gw.resolve_key(msg("x", agent="low"))[1])
        plain = await gw.history.load(gw.resolve_key(msg("x", agent="plain"))[1])
        assert low[0]["role"] == "system" and len(low) == 21
        assert len(plain) == 42 and all(m["role"] != "system" for m in plain)


async def test_the_default_threshold_follows_the_context_window(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    # an unknown model with a configured 10k window: 40 % → 4000 tokens
    settings = settings_factory(llm={"model": "house-model", "context_window": 10_000})
    fake_llm.responder = summaries_then_default()
    async with build_gateway(settings) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 20)
        fake_llm.script(reply_text("ok", usage={"input_tokens": 4000}))
        await (await gw.submit(msg("go"))).result()
        await settle(gw, key)
        assert (await gw.history.load(key))[0]["role"] == "system"


async def test_an_earlier_summary_is_merged_not_nested(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = _settings(settings_factory, default={"memory": {"consolidate_at_tokens": 5000}})
    fake_llm.responder = summaries_then_default("merged: project X, PostgreSQL, deploy pending")
    async with build_gateway(settings) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await gw.history.append(key, {"role": "system", "content": "[历史摘要]\nold: project X started"})
        await seed(gw, key, 20)
        fake_llm.script(reply_text("ok", usage=OVER))
        await (await gw.submit(msg("go"))).result()
        await settle(gw, key)
        history = await gw.history.load(key)
        systems = [m for m in history if m["role"] == "system"]
        assert len(systems) == 1
        assert systems[0]["content"] == "[历史摘要]\nmerged: project X, PostgreSQL, deploy pending"
        request = next(r.body or {} for r in fake_llm.message_requests() if is_summary_request(r.body or {}))
        prompt = str(request["messages"][0]["content"])
        assert "<previous-summary>\nold: project X started\n</previous-summary>" in prompt
        assert "[历史摘要]" not in prompt
        assert any(m["content"] == "[历史摘要]\nold: project X started" for m in await gw.history.archived(key))


@pytest.mark.parametrize(
    "bad",
    [
        http_error(400, "invalid request"),
        ScriptedReply(content=[]),
        reply_text("x" * 5000),
    ],
    ids=["error", "empty", "longer-than-original"],
)
async def test_a_bad_summary_leaves_the_history_byte_identical(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, bad: Any
) -> None:
    settings = _settings(settings_factory, default={"memory": {"consolidate_at_tokens": 5000}})
    settings.memory.flush_before_compaction = False  # the scripted failure must reach the summary call itself
    async with build_gateway(settings) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 20)
        fake_llm.script(reply_text("ok", usage=OVER), bad)
        with capture_logs() as logs:
            await (await gw.submit(msg("go"))).result()
            await settle(gw, key)
            layout = gw.history.layout("default")
            before = layout.history_file(key).read_bytes()
        assert len(fake_llm.message_requests()) == 2
        assert any(e["event"] == "consolidation_failed" for e in logs)
        assert not layout.archive_file(key).exists()
        gw.history.evict(key)
        assert len(await gw.history.load(key)) == 42
        assert layout.history_file(key).read_bytes() == before


async def test_prompt_too_long_compacts_once_and_the_retry_succeeds(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory()
    fake_llm.responder = summaries_then_default()
    async with build_gateway(settings) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 30)
        fake_llm.script(prompt_too_long())
        handle = await gw.submit(msg("one more"))
        events = [e async for e in handle]
        assert isinstance(events[-1], DoneEvent) and events[-1].full_text.startswith("reply to: one more")
        assert any(isinstance(e, NoticeEvent) and "compacting" in e.text for e in events)
        bodies = [r.body or {} for r in fake_llm.message_requests()]
        assert [is_summary_request(b) for b in bodies] == [False, True, False]
        retry = bodies[2]
        assert "[历史摘要]" in system_text(retry)
        assert len(retry["messages"]) < len(bodies[0]["messages"])
        history = await gw.history.load(key)
        assert history[0]["role"] == "system"
        assert history[-2]["content"] == "one more" and history[-1]["role"] == "assistant"
        assert len(await gw.history.archived(key)) + len(conversation(history)) == 62


async def test_prompt_too_long_after_compacting_tells_the_user(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory()
    fake_llm.responder = summaries_then_default()
    async with build_gateway(settings) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 30)
        fake_llm.script(prompt_too_long())
        fake_llm.responder = lambda body: reply_text("s") if is_summary_request(body) else prompt_too_long()
        final = await (await gw.submit(msg("one more"))).result()
        assert isinstance(final, ErrorEvent) and final.message == OVERFLOW_AFTER_RETRY.render("en")
        assert len(fake_llm.message_requests()) == 3  # the call, the summary, the one retry


async def test_consolidation_runs_after_the_reply_went_out(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = _settings(settings_factory, default={"memory": {"consolidate_at_tokens": 5000}})
    slow = reply_text(SUMMARY, first_byte_delay_s=0.3)
    fake_llm.responder = lambda body: slow if is_summary_request(body) else None
    async with build_gateway(settings) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 20)
        fake_llm.script(reply_text("answer", usage=OVER))
        final = await (await gw.submit(msg("go"))).result()
        assert isinstance(final, DoneEvent) and final.full_text == "answer"
        assert not any(r.completed.is_set() for r in fake_llm.message_requests() if is_summary_request(r.body or {}))
        assert not gw.is_busy(key) and gw.background(key) is not None  # beside the chat: a next turn starts at once
        await settle(gw, key)
        assert (await gw.history.load(key))[0]["role"] == "system"


async def test_durable_facts_are_flushed_to_memory_before_the_summary_replaces_them(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = _settings(settings_factory, default={"memory": {"consolidate_at_tokens": 5000}})

    def responder(body: dict[str, Any]) -> ScriptedReply:
        if is_summary_request(body):
            return reply_text(SUMMARY)
        if "MEMORY.md" in system_text(body):
            return reply_text("- 项目 X 的数据库是 PostgreSQL\n")
        return reply_text("fine")

    fake_llm.responder = responder
    async with build_gateway(settings) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 20)
        fake_llm.script(reply_text("ok", usage=OVER))
        await (await gw.submit(msg("go"))).result()
        await settle(gw, key)

        flushes = [r for r in fake_llm.message_requests() if "MEMORY.md" in system_text(r.body or {})]
        assert len(flushes) == 1 and "question 0" in str(flushes[0].body)  # the messages about to be archived
        memory_file = chat_memory_file(gw, gw.agents.get("default"), key)
        assert memory_file.read_text(encoding="utf-8") == "- 项目 X 的数据库是 PostgreSQL\n"
        history = await gw.history.load(key)
        assert history[0]["content"].startswith("[历史摘要]")  # the summary still happened after the flush


async def test_a_failed_memory_flush_does_not_stop_the_compaction(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = _settings(settings_factory, default={"memory": {"consolidate_at_tokens": 5000}})

    def responder(body: dict[str, Any]) -> ScriptedReply:
        if "MEMORY.md" in system_text(body):
            return http_error(400, "no")
        return reply_text(SUMMARY if is_summary_request(body) else "fine")

    fake_llm.responder = responder
    async with build_gateway(settings) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 20)
        fake_llm.script(reply_text("ok", usage=OVER))
        with capture_logs() as logs:
            await (await gw.submit(msg("go"))).result()
            await settle(gw, key)
        assert any(e["event"] == "memory_flush_failed" for e in logs)
        assert (await gw.history.load(key))[0]["content"].startswith("[历史摘要]")
        assert not chat_memory_file(gw, gw.agents.get("default"), key).exists()


async def test_overflow_on_a_one_message_chat_says_the_message_itself_is_too_long(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    from agenthub.gateway.turn import MESSAGE_TOO_LONG

    fake_llm.responder = summaries_then_default()
    async with build_gateway(_settings(settings_factory)) as gw:
        fake_llm.script(prompt_too_long())
        events = [e async for e in await gw.submit(msg("a paste far too long for the model"))]
        final = events[-1]
        assert isinstance(final, ErrorEvent) and final.message == MESSAGE_TOO_LONG.render("en")
        assert not [e for e in events if isinstance(e, NoticeEvent)]  # no "compacting and retrying" that never happens
        assert len(fake_llm.message_requests()) == 1  # no summary call, no pointless retry
        assert isinstance(await (await gw.submit(msg("short"))).result(), DoneEvent)  # the chat goes on
