"""Cold-start benchmark: how a fresh `agenthub serve` answers in the seconds after READY=1. A probe asks `/healthz`
every 50 ms (its latency is the daemon's event-loop lag: the handler itself takes microseconds) and a chat request
goes every 300 ms (each to a new chat, against the fake Messages API; "stored": until its SSE stream begins, which
is after the durable inbox stored it), per second after READY; then the same chat
warm, for comparison. "Normal speed" = within 2x the warm median (and +50 ms).

Run: `.venv/bin/python bench/bench_coldstart.py [--runs 3] [--seconds 6]`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_http import LoopThread, _start_daemon, _stop  # the daemon start-up the HTTP benchmark measures

from tests.support.fakes.anthropic import FakeAnthropic

PROBE_S = 0.05
CHAT_EVERY_S = 0.3


async def _timed(session: aiohttp.ClientSession, method: str, url: str, **kw: object) -> float:
    began = time.perf_counter()
    async with session.request(method, url, **kw) as resp:  # type: ignore[arg-type]
        await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{url}: status {resp.status}")
    return time.perf_counter() - began


async def _after_ready(port: int, token: str, seconds: float) -> tuple[list[tuple[float, float]], ...]:
    base, auth = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {token}"}
    probes: list[tuple[float, float]] = []
    chats: list[tuple[float, float]] = []
    accepts: list[tuple[float, float]] = []
    began = time.perf_counter()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:

        async def probe() -> None:
            while (at := time.perf_counter() - began) < seconds:
                probes.append((at, await _timed(session, "GET", base + "/healthz")))
                await asyncio.sleep(PROBE_S)

        async def chat(n: int, at: float) -> None:
            body = {"chat_id": f"cold-{n}", "content": f"hello {n}"}
            url = base + "/api/agents/default/chat?stream=1"
            sent = time.perf_counter()
            async with session.post(url, json=body, headers=auth) as resp:  # the stream begins once it is stored
                accepts.append((at, time.perf_counter() - sent))
                await resp.read()
            chats.append((at, time.perf_counter() - sent))

        tasks = [asyncio.create_task(probe())]
        n = 0
        while (at := time.perf_counter() - began) < seconds:
            tasks.append(asyncio.create_task(chat(n, at)))
            n += 1
            await asyncio.sleep(CHAT_EVERY_S)
        await asyncio.gather(*tasks)
        warm: list[tuple[float, float]] = []
        for i in range(10):
            body = {"chat_id": f"warm-{i}", "content": "warm"}
            chat_url = base + "/api/agents/default/chat"
            warm.append((0.0, await _timed(session, "POST", chat_url, json=body, headers=auth)))
    return probes, chats, accepts, warm


def one_run(llm_url: str, load: LoopThread, seconds: float) -> tuple[float, float, list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        child, port, token, ready = _start_daemon(Path(tmp), llm_url, True)
        try:
            probes, chats, accepts, warm = load.run(_after_ready(port, token, seconds))
        finally:
            _stop(child)
    warm_ms = statistics.median(w for _, w in warm) * 1000
    normal_ms = 2 * warm_ms + 50
    slow = [at for at, latency in chats if latency * 1000 > normal_ms]
    normal_from = max(slow) + CHAT_EVERY_S if slow else 0.0
    lines = []
    for second in range(int(seconds)):
        lag = [p * 1000 for at, p in probes if second <= at < second + 1]
        turn = [c * 1000 for at, c in chats if second <= at < second + 1]
        stored = [c * 1000 for at, c in accepts if second <= at < second + 1]
        lag_text = f"loop lag max {max(lag):5.0f} ms p50 {statistics.median(lag):4.0f} ms" if lag else "no probe"
        turn_text = f"chat max {max(turn):5.0f} ms, stored max {max(stored):5.0f} ms" if turn else "no chat"
        lines.append(f"  {second}-{second + 1} s after READY: {lag_text}; {turn_text}")
    lines.append(f"  warm chat median {warm_ms:.0f} ms; chats at normal speed from {normal_from:.1f} s after READY")
    return ready, normal_from, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    llm, load = LoopThread(), LoopThread()
    fake = FakeAnthropic()
    llm.run(fake.start())
    try:
        for run in range(args.runs):
            ready, normal_from, lines = one_run(fake.base_url, load, args.seconds)
            print(f"run {run + 1}: READY in {ready:.2f} s; chats at normal speed {normal_from:.1f} s after READY")
            print("\n".join(lines))
    finally:
        llm.run(fake.stop())
        for thread in (load, llm):
            thread.close()


if __name__ == "__main__":
    main()
