"""Request-building benchmark: what the daemon does per turn to make a model call's request for a session of N
stored messages against one of 10: the context (`ContextBuilder.build`), the body on the wire (`sdk.request_body`)
and the prompt-cache fingerprint (`CacheWatch.observe`), in one process, no model and no HTTP.

Each turn appends a user message, builds, and appends the answer, as a chat does; long and short take turns. Prints
the median per turn of each part, and long ÷ short.

Run: `PYTHONPATH=. .venv/bin/python bench/bench_request_build.py [--messages 3000] [--turns 200]`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agenthub.agent.context import ContextBudget, ContextBuilder
from agenthub.agent.definition import AgentConfig, AgentDefinition
from agenthub.llm import sdk
from agenthub.llm.cache_watch import CacheWatch
from agenthub.llm.types import LLMResponse
from agenthub.memory.files import MemoryFiles
from agenthub.messages import Usage
from agenthub.session_keys import session_key

AGENT = AgentDefinition("default", AgentConfig(), "You are a bench persona.")
PARTS = ("context", "body", "fingerprint")
REPLY = LLMResponse([{"type": "text", "text": "ok"}], "end_turn", Usage(), message_id="msg_1")


def _history(chat: str, messages: int) -> list[dict[str, Any]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} of {chat}", "timestamp": 1_000 + i}
        for i in range(messages)
    ]


async def _turn(builder: ContextBuilder, watch: CacheWatch, chat: str, history: list[dict[str, Any]]) -> list[float]:
    key = session_key("default", "bench", chat)
    began = time.perf_counter()
    built = await builder.build(
        agent=AGENT, key=key, sender_id="u", history=history, tools=[], model="claude-bench", max_tokens=1024
    )
    request = dataclasses.replace(built, purpose="turn")
    context = time.perf_counter()
    sdk.request_body(request)
    body = time.perf_counter()
    watch.observe(request, REPLY)
    return [context - began, body - context, time.perf_counter() - body]


async def measure(messages: int, turns: int) -> dict[str, list[float]]:
    """Per chat, the median seconds of each part of a turn's request building."""
    with tempfile.TemporaryDirectory() as tmp:
        builder = ContextBuilder(MemoryFiles(Path(tmp) / "data", Path(tmp) / "auth"), ContextBudget())
        watch = CacheWatch()
        histories = {"long": _history("long", messages), "short": _history("short", 10)}
        samples: dict[str, list[list[float]]] = {chat: [] for chat in histories}
        for turn in range(turns + 1):
            for chat, history in histories.items():
                history = [*history, {"role": "user", "content": f"turn {turn}", "timestamp": 10_000 + turn}]
                spent = await _turn(builder, watch, chat, history)
                if turn:  # the first builds convert the whole history: not a turn's cost
                    samples[chat].append(spent)
                histories[chat] = [*history, {"role": "assistant", "content": f"answer {turn}"}]
    return {chat: [statistics.median(part) for part in zip(*rows, strict=True)] for chat, rows in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=3000, help="stored messages of the long session")
    parser.add_argument("--turns", type=int, default=200, help="turns measured on each of long and short")
    args = parser.parse_args()
    medians = asyncio.run(measure(args.messages, args.turns))
    for chat in ("long", "short"):
        parts = ", ".join(f"{name} {ms * 1e6:7.1f} µs" for name, ms in zip(PARTS, medians[chat], strict=True))
        print(f"{chat:>5}: {parts}; sum {sum(medians[chat]) * 1e6:7.1f} µs")
    long, short = medians["long"], medians["short"]
    ratios = ", ".join(f"{name} {a / b:.2f}" for name, a, b in zip(PARTS, long, short, strict=True))
    print(f"request building at {args.messages} ÷ at 10 messages: {ratios}; sum {sum(long) / sum(short):.2f}")


if __name__ == "__main__":
    main()
