"""Requests built from the history: interrupted turns stay separate, and the conversation prefix is cached."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

from agenthub.agent.conversion import INTERRUPTED_PLACEHOLDER
from agenthub.gateway.core import GatewayCore
from agenthub.messages import DoneEvent, ErrorEvent, InboundMessage
from agenthub.session_keys import SessionKey
from tests.support.fakes.anthropic import FakeAnthropic, hang, reply_text, reply_tool

KEY = SessionKey("default", "cli", "direct")
CACHE = '"cache_control": {"type": "ephemeral"}'


async def _say(gw: GatewayCore, text: str) -> DoneEvent | ErrorEvent:
    return await (await gw.submit(InboundMessage("cli", "direct", "me", text))).result()


def _bodies(fake: FakeAnthropic) -> list[dict[str, Any]]:
    return [r.body for r in fake.message_requests() if r.body is not None]


def _prompt(body: dict[str, Any]) -> str:
    """The request in the order the API builds its prompt (and its cache prefix): tools, system, messages."""
    return json.dumps([body["tools"], body["system"], body["messages"]], ensure_ascii=False)


def _breakpoints(body: dict[str, Any]) -> int:
    return json.dumps(body, ensure_ascii=False).count('"cache_control"')


async def _stop_a_hung_turn(gw: GatewayCore, fake: FakeAnthropic, text: str) -> None:
    fake.script(hang())
    handle = await gw.submit(InboundMessage("cli", "direct", "me", text))
    await fake.wait_for_requests(len(fake.requests) + 1)
    assert isinstance(await _say(gw, "/stop"), DoneEvent)
    final = await asyncio.wait_for(handle.result(), 5)
    assert isinstance(final, ErrorEvent) and final.code == "stopped"


async def test_a_stopped_turn_is_not_merged_into_the_next_request(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    assert isinstance(await _say(gateway, "hi"), DoneEvent)
    await _stop_a_hung_turn(gateway, fake_llm, "delete all my files")
    assert isinstance(await _say(gateway, "what's the weather"), DoneEvent)
    body = _bodies(fake_llm)[-1]
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    stopped, placeholder, weather = body["messages"][2:]
    assert stopped["content"][0]["text"].startswith("delete all my files")
    assert placeholder == {"role": "assistant", "content": INTERRUPTED_PLACEHOLDER}
    assert weather["content"][0]["text"].startswith("what's the weather")
    assert "what's the weather" not in json.dumps(stopped, ensure_ascii=False)
    # the placeholder is only sent, never stored
    stored = [m["content"] for m in await gateway.history.load(KEY)]
    assert INTERRUPTED_PLACEHOLDER not in stored and stored.count("delete all my files") == 1


async def test_the_placeholder_is_deterministic_so_the_prefix_stays_stable(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    await _stop_a_hung_turn(gateway, fake_llm, "first, stopped")
    await _say(gateway, "second")
    await _say(gateway, "third")
    second, third = _bodies(fake_llm)[-2:]
    sent_before = json.dumps(second["messages"], ensure_ascii=False)
    prefix = sent_before[: sent_before.rindex(", " + CACHE)]
    assert json.dumps(third["messages"], ensure_ascii=False).startswith(prefix)
    assert INTERRUPTED_PLACEHOLDER in prefix


async def test_the_newest_message_carries_a_cache_breakpoint(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    await _say(gateway, "first")
    await _say(gateway, "second")
    first, second = _bodies(fake_llm)
    for body in (first, second):
        newest = body["messages"][-1]["content"]
        assert newest[-1]["cache_control"] == {"type": "ephemeral"}
        assert _breakpoints(body) == 3  # system, tools, newest message (the API allows 4)
    assert "cache_control" not in json.dumps(second["messages"][:-1])  # the breakpoint moved on
    # the whole first prompt, up to its message breakpoint, is a byte-identical prefix of the second
    one, two = _prompt(first), _prompt(second)
    cut = one.rindex(", " + CACHE)
    assert two.startswith(one[:cut]) and one[:cut].endswith(json.dumps(first["messages"][0]["content"][0]["text"]))


async def test_a_tool_loop_moves_the_breakpoint_and_never_exceeds_four(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(reply_tool("read_memory", {}), reply_tool("read_memory", {}), reply_text("done"))
    assert isinstance(await _say(gateway, "look twice"), DoneEvent)
    calls = _bodies(fake_llm)
    assert [_breakpoints(b) for b in calls] == [3, 4, 4]
    for earlier, later in itertools.pairwise(calls):
        newest = later["messages"][-1]["content"][-1]
        assert newest["type"] == "tool_result" and newest["cache_control"] == {"type": "ephemeral"}
        sent = json.dumps(earlier["messages"], ensure_ascii=False)
        # everything up to the previous call's newest breakpoint is sent again unchanged
        assert json.dumps(later["messages"], ensure_ascii=False).startswith(sent[: sent.rindex(", " + CACHE)])
