"""L3 on three real `agenthub serve` sharing one database: one run per interval, all of them by the one instance
that holds lease `memory-l3`, seen where it shows, at the fake model (an L3 request asks to rewrite MEMORY.md)."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import json
import time
from pathlib import Path
from typing import Any

from tests.support.daemons import Deployment, Instance, instance_of, message_text
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, reply_text

INTERVAL_S = 1.0
LEASE_S = 15.0
"""The default: nothing here waits for an expiry, and a loaded machine's slow renewal (a holder gives a lease up
when a renewal takes over lease_s/3) would hand L3 over, which is allowed but not what this test looks at."""
RUNS = 4
L3_MEMORY = "You maintain MEMORY.md"
L3_LEASE = "memory-l3"


def _is_l3_memory(body: dict[str, Any]) -> bool:
    return L3_MEMORY in json.dumps(body.get("system"), ensure_ascii=False)


Run = tuple[float, float, int | None]
"""An L3 request at the fake model: (monotonic time, wall-clock time, the instance that sent it)."""


def _holding(instance: Instance) -> list[tuple[float, float]]:
    """The wall-clock spans in which `instance` held lease `memory-l3`, from its own log (gained → lost)."""
    changes = sorted(
        [(_wall(e), True) for e in instance.events("lease_gained", lease=L3_LEASE)]
        + [(_wall(e), False) for e in instance.events("lease_lost", lease=L3_LEASE)]
    )
    spans, since = [], None
    for at, gained in changes:
        if gained and since is None:
            since = at
        elif not gained and since is not None:
            spans.append((since, at))
            since = None
    return spans if since is None else [*spans, (since, float("inf"))]


def _wall(event: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(str(event["timestamp"])).timestamp()


def _holder_at(spans: dict[int, list[tuple[float, float]]], wall: float) -> list[int]:
    return [index for index, held in spans.items() if any(start <= wall < end for start, end in held)]


async def test_with_three_daemons_l3_runs_once_per_interval_on_the_lease_holder_only(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    seen: list[tuple[float, float, dict[str, Any]]] = []

    def answer(body: dict[str, Any]) -> ScriptedReply:
        if _is_l3_memory(body):
            seen.append((time.monotonic(), time.time(), body))
            return reply_text(f"# Memory\n- run {len(seen)}: the user talks about numbered messages\n")
        return reply_text("noted")

    fake_llm.responder = answer
    env = {"AGENTHUB_MEMORY__L3_INTERVAL_S": str(INTERVAL_S)}
    async with Deployment(tmp_path, fake_llm, count=3, dsn=postgres_dsn, lease_s=LEASE_S, env=env) as d:
        await d.start_all()
        client = d.client()
        n = 0
        deadline = time.monotonic() + 60  # a bound, not a measurement
        while len(seen) < RUNS:  # new material for every interval, each message through the next instance
            assert time.monotonic() < deadline, f"only {len(seen)} L3 runs"
            n += 1
            status, body = await client.chat(f"c{n % 5}", message_text(f"c{n % 5}", n))
            assert status == 200, body
            await asyncio.sleep(INTERVAL_S / 4)
        await asyncio.sleep(2 * INTERVAL_S)  # a run the others might have started meanwhile arrives too

        senders = {id(r.body): instance_of(r) for r in fake_llm.message_requests() if r.body is not None}
        runs: list[Run] = [(mono, wall, senders[id(body)]) for mono, wall, body in seen]
        spans = {i.index: _holding(i) for i in d.instances}
        held = sorted(span for each in spans.values() for span in each)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(held)), spans  # one holder at a time
        for _, wall, sender in runs:  # every run by the instance holding the lease then
            assert _holder_at(spans, wall) == [sender], (sender, wall, spans)
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(runs)]
        assert min(gaps) >= 0.8 * INTERVAL_S, gaps  # one run per interval: never two in one
