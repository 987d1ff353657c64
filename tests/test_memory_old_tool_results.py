"""Tool results older than the newest two user turns are sent cut (head + marker + tail), stably, never stored cut."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agenthub.app import build_gateway
from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.memory.context import cut_middle
from agenthub.messages import DoneEvent
from agenthub.session.keys import SessionKey
from tests.conftest import write_agent
from tests.fakes.anthropic import FakeAnthropic, reply_text, reply_tool
from tests.test_memory_support import msg

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


async def _read_then_chat(gw: GatewayCore, fake: FakeAnthropic) -> list[dict[str, Any]]:
    fake.script(reply_tool("read_file", {"path": "big.txt"}, tool_id="toolu_1"), reply_text("read it"))
    await _say(gw, "read big.txt")
    for text in ("second", "third", "fourth"):
        await _say(gw, text)
    return [r.body or {} for r in fake.message_requests()]


async def test_old_tool_results_are_cut_identically_every_turn(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    async with build_gateway(_settings(settings_factory)) as gw:
        bodies = await _read_then_chat(gw, fake_llm)
        assert len(bodies) == 5  # tool call, its follow-up, then one request per later turn
        expected = BIG[:3000] + f"\n[… {len(BIG) - 4000} characters cut …]\n" + BIG[-1000:]
        assert cut_middle(BIG, 4000) == expected
        assert _results(bodies[1]) == [BIG] and _results(bodies[2]) == [BIG]  # within the newest two user turns
        assert _results(bodies[3]) == [expected] and _results(bodies[4]) == [expected]
        for body in bodies[3:]:  # the pair stays intact
            uses = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
            assert [b.get("id") for b in uses if b.get("type") == "tool_use"] == ["toolu_1"]
            assert [b.get("tool_use_id") for b in uses if b.get("type") == "tool_result"] == ["toolu_1"]
        # the third request's conversation, up to its cache breakpoint, is a byte-identical prefix of the fourth's
        third, fourth = (json.dumps(b["messages"], ensure_ascii=False) for b in bodies[3:])
        assert fourth.startswith(third[: third.rindex(CACHE)])
        history = await gw.history.load(SessionKey("default", "cli", "c1"))
        stored = [b.get("content") for m in history if isinstance(m["content"], list) for b in m["content"]]
        assert BIG in stored  # only the request is cut, never the history


async def test_zero_keeps_old_tool_results_whole(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    async with build_gateway(_settings(settings_factory, old_tool_result_chars=0)) as gw:
        bodies = await _read_then_chat(gw, fake_llm)
        assert _results(bodies[4]) == [BIG]
