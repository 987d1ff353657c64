"""Gateway benchmark: N sessions x M turns at latency L against the fake Messages API, and per-turn overhead."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anthropic

from agenthub.app import build_gateway
from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.log import configure_logging
from agenthub.messages import DoneEvent, InboundMessage
from tests.fakes.anthropic import FakeAnthropic
from tests.roots import make_settings


def _settings(root: Path, base_url: str, cap: int, fsync: bool) -> Settings:
    return make_settings(
        root,
        llm={"base_url": base_url, "api_key": "bench-key", "max_retries": 0, "timeout_s": 30},
        session={"max_concurrent_llm": cap, "fsync": fsync},
    )


async def _session(gw: GatewayCore, chat: str, turns: int) -> None:
    for turn in range(turns):
        final = await (await gw.submit(InboundMessage("bench", chat, "u", f"turn {turn} from {chat}"))).result()
        if not isinstance(final, DoneEvent):
            raise RuntimeError(f"turn failed: {final}")


async def throughput(sessions: int, turns: int, latency_s: float, fsync: bool) -> float:
    """Wall time of `sessions` concurrent sessions x `turns` sequential turns, over the ideal turns x latency."""
    async with FakeAnthropic(first_byte_delay_s=latency_s) as fake:
        with tempfile.TemporaryDirectory() as tmp:
            async with build_gateway(_settings(Path(tmp), fake.base_url, sessions, fsync)) as gw:
                await _session(gw, "warmup", 1)
                began = time.perf_counter()
                await asyncio.gather(*(_session(gw, f"s{i}", turns) for i in range(sessions)))
                wall = time.perf_counter() - began
    ideal = turns * latency_s
    print(
        f"throughput: {sessions} sessions x {turns} turns at {latency_s * 1000:.0f} ms, fsync={fsync}: "
        f"wall {wall:.2f} s, ideal {ideal:.2f} s, ratio {wall / ideal:.2f}"
    )
    return wall / ideal


async def _bare_session(client: anthropic.AsyncAnthropic, chat: str, turns: int) -> None:
    for turn in range(turns):
        content = f"turn {turn} from {chat}"
        async with client.messages.stream(
            model="claude-sonnet-4-6", max_tokens=1024, messages=[{"role": "user", "content": content}]
        ) as stream:
            await stream.get_final_message()


async def bare_throughput(sessions: int, turns: int, latency_s: float) -> float:
    """The same load straight through one SDK client: what the fake server and the SDK alone cost."""
    async with FakeAnthropic(first_byte_delay_s=latency_s) as fake:
        client = _client(fake.base_url)
        try:
            await _bare_session(client, "warmup", 1)
            began = time.perf_counter()
            await asyncio.gather(*(_bare_session(client, f"s{i}", turns) for i in range(sessions)))
            wall = time.perf_counter() - began
        finally:
            await client.close()
    ideal = turns * latency_s
    print(f"  baseline, bare SDK client, same load: wall {wall:.2f} s, ratio {wall / ideal:.2f}")
    return wall / ideal


def _client(base_url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=base_url, api_key="bench-key", max_retries=0, http_client=anthropic.DefaultAioHttpClient()
    )


async def _bare_sdk_call_s(base_url: str, calls: int) -> float:
    client = _client(base_url)
    try:
        samples = []
        for i in range(calls):
            began = time.perf_counter()
            async with client.messages.stream(
                model="claude-sonnet-4-6", max_tokens=1024, messages=[{"role": "user", "content": f"turn {i}"}]
            ) as stream:
                await stream.get_final_message()
            samples.append(time.perf_counter() - began)
        return statistics.median(samples)
    finally:
        await client.close()


async def _gateway_turn_s(gw: GatewayCore, sessions: int, turns: int) -> float:
    samples = []
    for turn in range(turns):
        for i in range(sessions):
            began = time.perf_counter()
            await _session_turn(gw, f"o{i}", turn)
            samples.append(time.perf_counter() - began)
    return statistics.median(samples)


async def _session_turn(gw: GatewayCore, chat: str, turn: int) -> None:
    final = await (await gw.submit(InboundMessage("bench", chat, "u", f"turn {turn}"))).result()
    if not isinstance(final, DoneEvent):
        raise RuntimeError(f"turn failed: {final}")


async def overhead(calls: int, fsync: bool) -> float:
    """Median time of one gateway turn at zero latency over the median time of one bare SDK streaming call."""
    async with FakeAnthropic() as fake:
        bare = await _bare_sdk_call_s(fake.base_url, calls)
        with tempfile.TemporaryDirectory() as tmp:
            async with build_gateway(_settings(Path(tmp), fake.base_url, 64, fsync)) as gw:
                await _session_turn(gw, "warmup", 0)
                turn = await _gateway_turn_s(gw, 10, max(1, calls // 10))
    print(
        f"overhead at 0 ms, fsync={fsync}: gateway turn {turn * 1000:.2f} ms, bare SDK call {bare * 1000:.2f} ms, "
        f"ratio {turn / bare:.2f}"
    )
    return turn / bare


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--calls", type=int, default=200, help="sequential calls for the overhead measure")
    args = parser.parse_args()
    configure_logging("warning", "console", stream=sys.stderr)
    await throughput(args.sessions, args.turns, args.latency_ms / 1000, True)
    await bare_throughput(args.sessions, args.turns, args.latency_ms / 1000)
    for fsync in (True, False):
        await overhead(args.calls, fsync)


if __name__ == "__main__":
    asyncio.run(main())
