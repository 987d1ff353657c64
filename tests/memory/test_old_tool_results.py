"""Tool results older than the newest two user turns are sent cut (head + marker + tail), stably, never stored cut."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

from agenthub.agent.conversion import CUT_STEP_TURNS, RECENT_TURNS, cut_middle
from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent
from agenthub.session_keys import SessionKey
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, reply_text, reply_tool
from tests.support.memory import msg

CACHE = ', "cache_control": {"type": "ephemeral"}'
BIG = "HEAD-" + "".join(f"line {i:05d}\n" for i in range(2000)) + "-TAIL"


def _settings(settings_factory: Callable[..., Settings], **memory: Any) -> Settings:
    settings = settings_factory(memory=memory) if memory else settings_factory()
    write_agent(settings.agents_dir, "default", {"tools": ["read_file"]})
    (settings.workspace_dir / "default").mkdir(parents=True, exist_ok=True)
    (settings.workspace_dir / "default" / "big.txt").write_text(BIG, encoding="utf-8")
    return settings


def _results(body: dict[str, Any]) -> list[Any]:
    return [
        b.get("content")
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]


async def _say(gw: GatewayCore, text: str) -> None:
    assert isinstance(await (await gw.submit(msg(text))).result(), DoneEvent)


TURNS = 2 + CUT_STEP_TURNS + 1  # the read, then enough turns for the cut-off to move once and one more


async def _read_then_chat(gw: GatewayCore, fake: FakeAnthropic) -> list[dict[str, Any]]:
    """The first request of every turn (the read's follow-up stands for turn 1)."""
    fake.script(reply_tool("read_file", {"path": "big.txt"}, tool_id="toolu_1"), reply_text("read it"))
    await _say(gw, "read big.txt")
    for turn in range(2, TURNS + 1):
        await _say(gw, f"turn {turn}")
    bodies = [r.body or {} for r in fake.message_requests()]
    assert len(bodies) == TURNS + 1  # the tool call, its follow-up, then one request per later turn
    return bodies[1:]


def _unmarked(body: dict[str, Any]) -> list[Any]:
    """The request's messages without `cache_control` markers: the breakpoint moves to the newest message each
    turn, and the cache matches on the content before it, not on where the marker sat."""
    text = json.dumps(body["messages"], ensure_ascii=False).replace(CACHE, "")
    messages: list[Any] = json.loads(text)
    return messages


async def test_old_tool_results_are_cut_identically_every_turn(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    async with build_gateway(_settings(settings_factory)) as gw:
        turns = await _read_then_chat(gw, fake_llm)  # turns[k] is the request of turn k + 1
        expected = BIG[:3000] + f"\n[… {len(BIG) - 4000} characters cut …]\n" + BIG[-1000:]
        assert cut_middle(BIG, 4000) == expected
        first_cut = RECENT_TURNS + CUT_STEP_TURNS  # turn number whose request first cuts turn 1's result
        for number, body in enumerate(turns, start=1):
            assert _results(body) == ([expected] if number >= first_cut else [BIG]), number
            uses = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
            assert [b.get("id") for b in uses if b.get("type") == "tool_use"] == ["toolu_1"]
            assert [b.get("tool_use_id") for b in uses if b.get("type") == "tool_result"] == ["toolu_1"]
        # every request's conversation is an identical prefix of the next one's, except once: where the cut-off moves
        breaks = [
            number
            for number, (before, after) in enumerate(itertools.pairwise(turns), start=2)
            if _unmarked(after)[: len(before["messages"])] != _unmarked(before)
        ]
        assert breaks == [first_cut]
        history = await gw.history.load(SessionKey("default", "cli", "c1"))
        stored = [b.get("content") for m in history if isinstance(m["content"], list) for b in m["content"]]
        assert BIG in stored  # only the request is cut, never the history


async def test_zero_keeps_old_tool_results_whole(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    async with build_gateway(_settings(settings_factory, old_tool_result_chars=0)) as gw:
        turns = await _read_then_chat(gw, fake_llm)
        assert _results(turns[-1]) == [BIG]
