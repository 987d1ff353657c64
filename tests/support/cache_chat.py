"""A long chat against the fake model with Anthropic's prompt cache: what bench/bench_cache.py reports and a test
holds to (≥ 90 % of input tokens read from the cache over 30 turns with two memory writes)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agenthub.clock import ManualClock
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent, InboundMessage, Usage
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, reply_text, reply_tool
from tests.support.fakes.prompt_cache import PromptCache
from tests.support.roots import make_settings

TARGET = 0.90
MEMORY_TURNS = (10, 20)
TOPICS = ["部署", "数据库迁移", "monitoring", "发布计划", "API design", "权限", "budget", "测试覆盖率"]


@dataclass
class Totals:
    """Every model call's usage added up."""

    calls: int = 0
    usage: Usage = field(default_factory=Usage)

    def add(self, _seconds: float, usage: Usage) -> None:
        self.calls += 1
        self.usage = self.usage + usage


def _answer(turn: int) -> str:
    topic = TOPICS[turn % len(TOPICS)]
    zh = f"关于{topic}，第{turn}轮的建议：先确认范围，再评估风险，安排负责人和截止日期，并准备回滚方案。"
    en = f" For {topic} (turn {turn}) keep each change small, measure it, and track it in ticket T-{turn:04d}."
    return (zh + en) * 3


def responder(body: dict[str, Any]) -> ScriptedReply:
    last = body["messages"][-1]
    content = last["content"]
    text = content if isinstance(content, str) else " ".join(str(b.get("text", "")) for b in content)
    blocks = content if isinstance(content, list) else []
    if "[remember]" in text and not any(b.get("type") == "tool_result" for b in blocks):
        fact = f"- The user decided on turn {text.split('：')[0]} to keep a rollback plan for every release."
        return reply_tool("write_memory", {"content": fact, "mode": "append"}, text="我记下来了。")
    return reply_text(_answer(len(body["messages"])))


async def long_chat(
    turns: int, gap_s: float, memory_notes: bool
) -> tuple[Totals, dict[str, int], list[dict[str, Any]]]:
    """Run the chat; (usage of every call, breaks named by cause, the request bodies)."""
    clock = ManualClock()
    totals = Totals()
    with tempfile.TemporaryDirectory() as tmp:
        cache = PromptCache(clock=clock)
        async with FakeAnthropic(responder=responder, prompt_cache=cache) as fake:
            settings = make_settings(Path(tmp), fake.base_url, session={"fsync": False}, llm={"model": "bench-cache"})
            async with build_gateway(settings, clock=clock) as gw:
                gw.context.memory_notes = memory_notes
                gw.providers.call_log.observe(totals.add)
                for turn in range(turns):
                    text = f"第{turn}轮：请帮我规划{TOPICS[turn % len(TOPICS)]}，要点包括负责人、时间和风险。"
                    if turn in MEMORY_TURNS:
                        text += " [remember]"
                    final = await (await gw.submit(InboundMessage("cli", "bench", "user", text))).result()
                    assert isinstance(final, DoneEvent), final
                    clock.advance(gap_s)
                breaks = dict(gw.cache_watch.breaks)
                requests = [r.body for r in fake.message_requests() if r.body is not None]
    return totals, breaks, requests
