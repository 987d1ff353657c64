"""L3 on three real `agenthub serve` sharing one database: one run per interval, all of them by the one instance
that holds lease `memory-l3`, seen where it shows, at the fake model (an L3 request asks to rewrite MEMORY.md)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from tests.support.daemons import Deployment, instance_of, message_text
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, reply_text

INTERVAL_S = 1.0
LEASE_S = 15.0
"""The default: nothing here waits for an expiry, and a loaded machine's slow renewal (a holder gives a lease up
when a renewal takes over lease_s/3) would hand L3 over, which is allowed but not what this test looks at."""
RUNS = 4
L3_MEMORY = "You maintain MEMORY.md"


def _is_l3_memory(body: dict[str, Any]) -> bool:
    return L3_MEMORY in json.dumps(body.get("system"), ensure_ascii=False)


async def test_with_three_daemons_l3_runs_once_per_interval_on_the_lease_holder_only(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    l3_at: list[float] = []

    def answer(body: dict[str, Any]) -> ScriptedReply:
        if _is_l3_memory(body):
            l3_at.append(time.monotonic())
            return reply_text(f"# Memory\n- run {len(l3_at)}: the user talks about numbered messages\n")
        return reply_text("noted")

    fake_llm.responder = answer
    env = {"AGENTHUB_MEMORY__L3_INTERVAL_S": str(INTERVAL_S)}
    async with Deployment(tmp_path, fake_llm, count=3, dsn=postgres_dsn, lease_s=LEASE_S, env=env) as d:
        await d.start_all()
        client = d.client()
        n = 0
        deadline = time.monotonic() + 60  # a bound, not a measurement
        while len(l3_at) < RUNS:  # new material for every interval, each message through the next instance
            assert time.monotonic() < deadline, f"only {len(l3_at)} L3 runs"
            n += 1
            status, body = await client.chat(f"c{n % 5}", message_text(f"c{n % 5}", n))
            assert status == 200, body
            await asyncio.sleep(INTERVAL_S / 4)
        await asyncio.sleep(2 * INTERVAL_S)  # a run the others might have started meanwhile arrives too

        l3 = [r for r in fake_llm.message_requests() if r.body is not None and _is_l3_memory(r.body)]
        holders = {i.index for i in d.instances if i.events("lease_gained", lease="memory-l3")}
        assert {instance_of(r) for r in l3} <= holders and len(holders) < len(d.instances), holders
        span = l3_at[-1] - l3_at[0]
        assert len(l3) <= span / INTERVAL_S + 1, (len(l3), span)  # never two runs in one interval
