"""Prompt cache over a long chat: a 30-turn chat with two memory writes against a fake model with Anthropic's cache.

Run from the repository root: `.venv/bin/python bench/bench_cache.py [--turns 30] [--gap-s 60]`.
The fake server simulates Anthropic's prefix cache (tests/support/fakes/prompt_cache.py: reads the longest prefix
written before at a breakpoint, 20-block lookback, 5-minute lifetime, nothing under 1024 tokens) and reports cache
reads and writes through the real SDK. Turns are `--gap-s` apart on a manual clock; at turns 10 and 20 the model
calls `write_memory` (an append to MEMORY.md) before answering. Reports the share of all input tokens read from
the cache (target ≥ 90 %), the tokens written to it, the breaks the gateway named, and the watch's CPU per call.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agenthub.llm.cache_watch import Fingerprint
from agenthub.llm.types import LLMRequest
from agenthub.log import configure_logging
from tests.support.cache_chat import TARGET, Totals, long_chat


def _watch_cost_ms(bodies: list[dict[str, Any]]) -> float:
    """CPU of fingerprinting the chat's largest request (what the watch adds to each call), in ms."""
    body = max(bodies, key=lambda b: len(str(b)))
    request = LLMRequest(body["model"], body.get("system") or [], body["messages"], body.get("tools") or [], 1)
    rounds = 50
    started = time.process_time()
    for _ in range(rounds):
        Fingerprint.of(request)
    return (time.process_time() - started) / rounds * 1000


def report(label: str, totals: Totals, breaks: dict[str, int], cost_ms: float) -> float:
    u = totals.usage
    share = u.cache_read_input_tokens / max(1, u.prompt_tokens)
    print(
        f"{label}: calls={totals.calls} input_total={u.prompt_tokens} cache_read={u.cache_read_input_tokens} "
        f"cache_write={u.cache_creation_input_tokens} uncached={u.input_tokens} read_share={share:.1%} "
        f"breaks={breaks or {}} fingerprint_ms={cost_ms:.2f}"
    )
    return share


async def measure(label: str, turns: int, gap_s: float, memory_notes: bool) -> float:
    totals, breaks, requests = await long_chat(turns, gap_s, memory_notes)
    return report(label, totals, breaks, _watch_cost_ms(requests))


async def main_async(turns: int, gap_s: float) -> int:
    before = await measure("memory in the system block  ", turns, gap_s, memory_notes=False)
    after = await measure("memory additions as notes    ", turns, gap_s, memory_notes=True)
    print(f"target: ≥ {TARGET:.0%} of input tokens read from the cache; with notes {after:.1%} (before {before:.1%})")
    return 0 if after >= TARGET else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--gap-s", type=float, default=60.0)
    args = parser.parse_args()
    configure_logging("error", "console", stream=sys.stderr)
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    for name in [n for n in os.environ if n.startswith("ANTHROPIC_")]:
        del os.environ[name]
    return asyncio.run(main_async(args.turns, args.gap_s))


if __name__ == "__main__":
    raise SystemExit(main())
