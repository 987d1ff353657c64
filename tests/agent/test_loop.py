"""The agent loop through the gateway: tool round trips, stored content blocks, system folding, prompt caching."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agenthub import i18n
from agenthub.agent.loop import CUT_NOTES
from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway
from agenthub.messages import DeltaEvent, DoneEvent, InboundMessage, ReplyEvent, ToolEvent
from agenthub.session_keys import SessionKey
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, cut_stream, reply_text, reply_tool

KEY = SessionKey("default", "cli", "direct")


def _msg(text: str, **kw: Any) -> InboundMessage:
    return InboundMessage("cli", "direct", "me", text, **kw)


async def _turn(gw: GatewayCore, text: str, **kw: Any) -> list[ReplyEvent]:
    return [e async for e in await gw.submit(_msg(text, **kw))]


def _bodies(fake: FakeAnthropic) -> list[dict[str, Any]]:
    return [r.body for r in fake.message_requests() if r.body is not None]


def _unmarked(value: Any) -> Any:
    """`value` without its `cache_control` breakpoints (they move to the newest message every call)."""
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


def _blocks(message: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    content = message["content"]
    return [b for b in content if b.get("type") == kind] if isinstance(content, list) else []


async def test_write_then_read_memory_round_trip(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(
        reply_tool("write_memory", {"content": "- prefers green tea"}, text="Noting that."),
        reply_tool("read_memory", {}),
        reply_text("Saved: you prefer green tea."),
    )
    events = await _turn(gateway, "remember I like green tea")
    final = events[-1]
    assert isinstance(final, DoneEvent)
    assert final.full_text == "Noting that.\n\nSaved: you prefer green tea."
    assert "".join(e.text for e in events if isinstance(e, DeltaEvent)) == final.full_text
    tools = [(e.name, e.phase, e.is_error) for e in events if isinstance(e, ToolEvent)]
    assert tools == [
        ("write_memory", "start", False),
        ("write_memory", "end", False),
        ("read_memory", "start", False),
        ("read_memory", "end", False),
    ]
    memory = gateway.settings.data_dir / "default" / "memory" / "MEMORY.md"
    assert memory.read_text(encoding="utf-8") == "- prefers green tea\n"

    first, second, third = _bodies(fake_llm)
    assert [m["role"] for m in first["messages"]] == ["user"]
    write_use = _blocks(second["messages"][1], "tool_use")[0]
    write_result = _blocks(second["messages"][2], "tool_result")[0]
    assert write_use["name"] == "write_memory" and write_use["input"] == {"content": "- prefers green tea"}
    assert write_result["tool_use_id"] == write_use["id"] and "memory saved" in write_result["content"]
    read_result = _blocks(third["messages"][4], "tool_result")[0]
    assert read_result["tool_use_id"] == _blocks(third["messages"][3], "tool_use")[0]["id"]
    assert read_result["content"] == "- prefers green tea\n" and "is_error" not in read_result

    history = await gateway.history.load(KEY)
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert history[1]["content"] == third["messages"][1]["content"]  # stored exactly as sent back
    assert _blocks(history[1], "tool_use")[0]["id"] == _blocks(history[2], "tool_result")[0]["tool_use_id"]
    assert _blocks(history[3], "tool_use")[0]["id"] == _blocks(history[4], "tool_result")[0]["tool_use_id"]
    assert history[5]["content"] == "Saved: you prefer green tea."

    # the next turn sends the stored pairs intact, and the memory now sits in the system prompt
    await _turn(gateway, "and now?")
    fourth = _bodies(fake_llm)[3]
    assert fourth["messages"][1:4] == third["messages"][1:4]
    assert fourth["messages"][4] == _unmarked(third["messages"][4])  # third's newest carried the breakpoint
    assert "prefers green tea" in json.dumps(fourth["system"], ensure_ascii=False)


async def test_tool_errors_go_back_to_the_model(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(
        ScriptedReply(
            content=[
                {"type": "tool_use", "id": "t1", "name": "write_memory", "input": {"content": 5}},
                {"type": "tool_use", "id": "t2", "name": "delete_everything", "input": {}},
                {"type": "tool_use", "id": "t3", "name": "get_time", "input": {}},
            ]
        ),
        reply_text("Sorry, that failed."),
    )
    events = await _turn(gateway, "try tools")
    assert isinstance(events[-1], DoneEvent) and events[-1].full_text == "Sorry, that failed."
    results = _blocks(_bodies(fake_llm)[1]["messages"][2], "tool_result")
    assert [(r["tool_use_id"], r.get("is_error")) for r in results] == [("t1", True), ("t2", True), ("t3", True)]
    assert "must be a string" in results[0]["content"]
    assert results[1]["content"] == "unknown tool: delete_everything"
    assert results[2]["content"] == "unknown tool: get_time"  # not on the default agent's whitelist
    assert [e.is_error for e in events if isinstance(e, ToolEvent) and e.phase == "end"] == [True, True, True]
    assert not (gateway.settings.data_dir / "default" / "memory" / "MEMORY.md").exists()


async def test_whitelisted_tools_are_offered_after_the_platform_tools(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory()
    write_agent(settings.agents_dir, "timer", {"tools": ["get_time", "no_such_tool"]})
    async with build_gateway(settings) as gw:
        fake_llm.script(reply_tool("get_time", {}), reply_text("It is now."))
        events = await _turn(gw, "what time is it", agent="timer")
    assert isinstance(events[-1], DoneEvent)
    body = _bodies(fake_llm)[0]
    assert [t["name"] for t in body["tools"]] == [
        "read_memory",
        "write_memory",
        "manage_cron_jobs",
        "memory_search",
        "get_time",
    ]
    result = _blocks(_bodies(fake_llm)[1]["messages"][2], "tool_result")[0]
    assert "is_error" not in result and result["content"][:2] == "20"


async def test_the_loop_is_bounded(settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic) -> None:
    fake_llm.responder = lambda body: reply_tool("read_memory", {})
    async with build_gateway(settings_factory(llm={"max_tool_iterations": 3})) as gw:
        events = await _turn(gw, "loop forever")
        final = events[-1]
        assert isinstance(final, DoneEvent) and "Stopped after 3 tool steps" in final.full_text
        assert len(fake_llm.message_requests()) == 3
        history = await gw.history.load(KEY)
        assert [m["role"] for m in history] == ["user"] + ["assistant", "user"] * 3 + ["assistant"]
        fake_llm.responder = None
        fake_llm.script(reply_text("fine"))
        await _turn(gw, "next")
    roles = [m["role"] for m in _bodies(fake_llm)[-1]["messages"]]
    assert roles == ["user"] + ["assistant", "user"] * 4  # pairs intact, notes merged, alternating roles


async def test_system_messages_are_folded_into_system(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    await gateway.history.append(
        KEY,
        {"role": "user", "content": "old question"},
        {"role": "assistant", "content": "old answer"},
        {"role": "system", "content": "[历史摘要] the user is planning a trip"},
    )
    await _turn(gateway, "where was I going?")
    body = _bodies(fake_llm)[0]
    assert all(m["role"] in ("user", "assistant") for m in body["messages"])
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    texts = [b["text"] for b in body["system"]]
    assert texts[0].startswith("You are a helpful assistant")
    assert "[历史摘要] the user is planning a trip" in texts


async def test_stable_prefix_is_marked_and_byte_identical_across_turns(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    await _turn(gateway, "first")
    await _turn(gateway, "second")
    first, second = _bodies(fake_llm)
    assert first["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert first["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    for part in ("system", "tools"):
        assert json.dumps(first[part], ensure_ascii=False) == json.dumps(second[part], ensure_ascii=False)
    # earlier messages render the same too (apart from the breakpoint that moved on to the newest message)
    assert second["messages"][0] == _unmarked(first["messages"][0])
    prefix = json.dumps([first["system"], first["tools"]], ensure_ascii=False)
    assert "via cli" not in prefix and "direct" not in prefix
    assert "via cli" in first["messages"][0]["content"][0]["text"]  # volatile data rides on the user message


async def test_cut_stream_is_stored_as_truncated(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(cut_stream("half a th"))
    events = await _turn(gateway, "long answer please")
    final = events[-1]
    assert isinstance(final, DoneEvent) and final.full_text == "half a th\n\n" + i18n.text(CUT_NOTES[None], "en")
    assert "".join(e.text for e in events if isinstance(e, DeltaEvent)) == final.full_text
    assert (await gateway.history.load(KEY))[-1]["content"] == final.full_text


async def test_usage_is_summed_per_turn_and_last_call_kept(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(
        reply_tool("read_memory", {}, usage={"input_tokens": 10, "output_tokens": 3, "cache_read_input_tokens": 50}),
        reply_text("ok", usage={"input_tokens": 20, "output_tokens": 4, "cache_read_input_tokens": 60}),
    )
    final = (await _turn(gateway, "hi"))[-1]
    assert isinstance(final, DoneEvent)
    assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.cache_read_input_tokens) == (30, 7, 110)
    meta = await gateway.history.get_meta(KEY)
    assert meta is not None and meta.last_usage is not None
    assert meta.last_usage["input_tokens"] == 20 and meta.last_usage["cache_read_input_tokens"] == 60
    assert gateway.stats.llm_calls == 2 and gateway.stats.tokens.cache_read_input_tokens == 110


async def test_a_streamed_turn_still_streams_every_call(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(reply_text("one two three four", chunks=4))
    events = await _turn(gateway, "hi")
    assert len([e for e in events if isinstance(e, DeltaEvent)]) == 4
    assert [r.stream for r in fake_llm.message_requests()] == [True]
