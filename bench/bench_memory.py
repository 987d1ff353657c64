"""Memory soak: 500 turns in one session against a fake model with an 8,000-token window.

Run from the repository root: `.venv/bin/python bench/bench_memory.py [--turns 500] [--window 8000]`.
The fake server answers through the real SDK and reports `input_tokens` from a tokenizer that counts 15 %
more than AgentHub's offline estimate (so calibration matters); it refuses requests whose input plus
`max_tokens` exceed the window with Anthropic's "prompt is too long" error. Reports overflow errors, the
largest request as a share of the window, the share of turns whose request prefix equals the previous
turn's (what prompt caching pays for) and whether archive + working history hold every message sent.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agenthub.hosting.app import build_gateway
from agenthub.llm.tokens import estimate_tokens
from agenthub.log import configure_logging
from agenthub.memory.cut import unpaired_tool_ids
from agenthub.messages import ErrorEvent, InboundMessage, NoticeEvent
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, prompt_too_long, reply_text, reply_tool
from tests.support.roots import make_settings

MAX_TOKENS = 512
TOKENIZER_SKEW = 1.15
SUMMARY = (
    "## 用户意图\n- 推进多个工作主题\n## 决定\n- 小步变更，保留回滚方案\n"
    "## 事实与标识符\n- 工单 T-xxxx 逐轮编号\n## 未完成任务\n- 跟进最近三轮的负责人与截止日期"
)
MEMORY = "- The user plans deployments, database choices and rollbacks; tickets are T-nnnn.\n"
TOPICS = ["部署", "数据库迁移", "monitoring", "发布计划", "API design", "权限", "budget", "测试覆盖率"]


@dataclass
class Stats:
    window: int
    chat_requests: list[dict[str, Any]] = field(default_factory=list)
    largest_input: int = 0
    overflow_replies: int = 0
    summaries: int = 0
    memory_flushes: int = 0
    assistant_messages: int = 0
    tool_results: int = 0


def _real_tokens(body: dict[str, Any]) -> int:
    return int(estimate_tokens([body.get("system"), body.get("messages"), body.get("tools")]) * TOKENIZER_SKEW)


def _reply_text(turn: int) -> str:
    topic = TOPICS[turn % len(TOPICS)]
    zh = f"关于{topic}，第{turn}轮的建议如下：先确认需求范围，再评估风险，最后安排负责人和截止日期。"
    en = f" For {topic} (turn {turn}) keep the change small, add a rollback plan and track it in ticket T-{turn:04d}."
    return zh * (1 + turn % 3) + en * (1 + turn % 2)


def make_responder(stats: Stats) -> Any:
    def respond(body: dict[str, Any]) -> ScriptedReply:
        system = " ".join(str(b.get("text", "")) for b in body.get("system") or [])
        tokens = _real_tokens(body)
        stats.largest_input = max(stats.largest_input, tokens)
        if tokens + int(body.get("max_tokens", 0)) > stats.window:
            stats.overflow_replies += 1
            return prompt_too_long(tokens + int(body["max_tokens"]), stats.window)
        usage = {"input_tokens": tokens}
        if "conversation summariser" in system:
            stats.summaries += 1
            return reply_text(SUMMARY, usage=usage)
        if "You maintain MEMORY.md" in system:  # the memory flush before a compaction
            stats.memory_flushes += 1
            return reply_text(MEMORY, usage=usage)
        stats.chat_requests.append(body)
        messages = body["messages"]
        last = messages[-1]["content"]
        turn = len(stats.chat_requests)
        stats.assistant_messages += 1
        if isinstance(last, str) and "[tool]" in last:
            stats.tool_results += 1
            return reply_tool("read_memory", {}, text="让我先查一下记忆。", usage=usage)
        return reply_text(_reply_text(turn), usage=usage)

    return respond


def without_cache_markers(value: Any) -> Any:
    """`value` with every `cache_control` key removed: the breakpoint moves to the newest message each turn, and
    the cache matches on the content before it, not on where the marker sat."""
    if isinstance(value, dict):
        return {k: without_cache_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache_markers(v) for v in value]
    return value


def prefix_share(firsts: list[dict[str, Any]]) -> float:
    """Share of turns whose first request starts with the previous turn's whole first request (markers aside)."""
    hits = 0
    for prev, cur in itertools.pairwise(without_cache_markers(firsts)):
        same_head = cur.get("system") == prev.get("system") and cur.get("tools") == prev.get("tools")
        if same_head and cur["messages"][: len(prev["messages"])] == prev["messages"]:
            hits += 1
    return hits / max(1, len(firsts) - 1)


async def soak(turns: int, window: int) -> int:
    stats = Stats(window)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        async with FakeAnthropic(responder=make_responder(stats)) as fake:
            settings = make_settings(
                root,
                session={"fsync": False, "lock_timeout_s": 60},
                llm={
                    "base_url": fake.base_url,
                    "api_key": "bench",
                    "model": "bench-8k",
                    "context_window": window,
                    "max_tokens": MAX_TOKENS,
                    "timeout_s": 30,
                },
            )
            started = time.perf_counter()
            errors = notices = 0
            firsts: list[dict[str, Any]] = []
            async with build_gateway(settings) as gw:
                for turn in range(turns):
                    topic = TOPICS[turn % len(TOPICS)]
                    text = f"第{turn}轮：请帮我规划{topic}，要点包括负责人、时间和风险。" + (
                        " [tool]" if turn % 10 == 9 else ""
                    )
                    before = len(stats.chat_requests)
                    handle = await gw.submit(InboundMessage("cli", "soak", "user", text))
                    events = [e async for e in handle]
                    errors += isinstance(events[-1], ErrorEvent)
                    notices += sum(isinstance(e, NoticeEvent) and "compacting" in e.text for e in events)
                    if len(stats.chat_requests) > before:
                        firsts.append(stats.chat_requests[before])
                key = gw.resolve_key(InboundMessage("cli", "soak", "user", "x"))[1]
                runner = gw.sessions.get(key)
                if runner is not None and runner.task is not None:
                    await runner.task
                working = await gw.history.load(key)
                archived = await gw.history.archived(key)
            elapsed = time.perf_counter() - started
    kept = [m for m in working + archived if m.get("role") != "system"]
    sent = turns + stats.assistant_messages + stats.tool_results
    print(f"turns={turns} window={window} elapsed_s={elapsed:.1f}")
    print(f"overflow_errors_shown={errors} overflow_replies={stats.overflow_replies} overflow_compactions={notices}")
    print(f"largest_request={stats.largest_input} tokens = {stats.largest_input / window:.1%} of the window")
    print(f"prefix_stable_turns={prefix_share(firsts):.1%} (of {len(firsts) - 1} turn pairs)")
    print(
        f"consolidations={stats.summaries} memory_flushes={stats.memory_flushes} "
        f"working={len(working)} archived={len(archived)}"
    )
    print(f"messages: archive+working={len(kept)} sent={sent} lost={sent - len(kept)}")
    print(f"unpaired_tool_ids_in_working_history={len(unpaired_tool_ids(working))}")
    ok = errors == 0 and sent == len(kept) and not unpaired_tool_ids(working)
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--window", type=int, default=8000)
    args = parser.parse_args()
    configure_logging("warning", "console", stream=sys.stderr)
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    for name in [n for n in os.environ if n.startswith("ANTHROPIC_")]:
        del os.environ[name]
    return asyncio.run(soak(args.turns, args.window))


if __name__ == "__main__":
    raise SystemExit(main())
