"""Gateway benchmark: N sessions x M turns at latency L against the fake Messages API (and the same load through a
bare SDK client, the floor), the per-turn overhead, and a turn on a long session against one on a short session."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anthropic

from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway
from agenthub.log import configure_logging
from agenthub.messages import DoneEvent, InboundMessage
from agenthub.session_keys import session_key
from agenthub.storage import jsonl
from agenthub.storage.paths import AgentLayout
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.roots import make_settings


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


def _seed_history(settings: Settings, chat: str, messages: int) -> None:
    """A session of `messages` stored messages (user and assistant taking turns), written straight to its file."""
    key = session_key("default", "bench", chat)
    records = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} of {chat}", "timestamp": 1_000 + i}
        for i in range(messages)
    ]
    jsonl.append_records(AgentLayout(settings.data_dir, "default").history_file(key), records, fsync=False)


@dataclass
class Turns:
    """Per chat, the median turn and the median of the same turns less the fake model's work in them."""

    wall_s: dict[str, float]
    own_s: dict[str, float]
    fake_s: dict[str, float]


async def _alternating_turns(gw: GatewayCore, fake: FakeAnthropic, chats: list[str], turns: int) -> Turns:
    wall: dict[str, list[float]] = {chat: [] for chat in chats}
    own: dict[str, list[float]] = {chat: [] for chat in chats}
    work: dict[str, list[float]] = {chat: [] for chat in chats}
    for turn in range(turns):
        for chat in chats:
            busy, began = fake.busy_s, time.perf_counter()
            await _session_turn(gw, chat, turn)
            spent, faked = time.perf_counter() - began, fake.busy_s - busy
            wall[chat].append(spent)
            own[chat].append(spent - faked)
            work[chat].append(faked)
    median = statistics.median
    return Turns(*({c: median(v) for c, v in of.items()} for of in (wall, own, work)))


async def _bare_call_s(client: anthropic.AsyncAnthropic, body: dict[str, Any], calls: int) -> float:
    """Median of one bare SDK streaming call sending `body` (a request the daemon made) as it is."""
    samples = []
    for _ in range(calls):
        began = time.perf_counter()
        async with client.messages.stream(**body) as stream:
            await stream.get_final_message()
        samples.append(time.perf_counter() - began)
    return statistics.median(samples)


async def long_session(messages: int, turns: int, fsync: bool) -> float:
    """Median turn on a session of `messages` messages over the median turn on one of 10 (0-ms model); and, for
    the floor, the same two requests sent by a bare SDK client. The fake model parses each body and estimates its
    usage in this process, so much of a long turn here is its work: its time is taken off each turn for the
    daemon's own share (`bench_long_session.py` runs the fake in a process of its own)."""
    async with FakeAnthropic() as fake:
        with tempfile.TemporaryDirectory() as tmp:
            settings = _settings(Path(tmp), fake.base_url, 64, fsync)
            _seed_history(settings, "long", messages)
            _seed_history(settings, "short", 10)
            async with build_gateway(settings) as gw:
                for chat in ("long", "short"):
                    await _session_turn(gw, chat, 0)  # loads the file; the turns measured run on the cache
                measured = await _alternating_turns(gw, fake, ["long", "short"], turns)
                kept = await gw.history.count(session_key("default", "bench", "long"))
        last_two = sorted((r.body or {} for r in fake.message_requests()[-2:]), key=lambda b: len(b["messages"]))
        bodies = dict(zip(("short", "long"), last_two, strict=True))
        client = _client(fake.base_url)
        try:
            bare = {chat: await _bare_call_s(client, _sdk_kwargs(bodies[chat]), turns) for chat in ("long", "short")}
        finally:
            await client.close()
    medians = measured.wall_s
    long_s, short_s = medians["long"], medians["short"]
    ratio = long_s / short_s
    print(
        f"long session at 0 ms, fsync={fsync}: a turn on {messages} messages {long_s * 1000:.2f} ms, on 10 messages "
        f"{short_s * 1000:.2f} ms, ratio {ratio:.2f} (target <= 2) {'met' if ratio <= 2 else 'MISSED'}"
        f"{'' if kept >= messages else f' (history compacted to {kept}: not comparable)'}"
    )
    own, work = measured.own_s, measured.fake_s
    own_ratio = own["long"] / own["short"]
    print(
        f"  the fake model's work in this process (parsing the body, estimating its usage): "
        f"{work['long'] * 1000:.2f} ms of the long turn, {work['short'] * 1000:.2f} ms of the short; the daemon's "
        f"own share: {own['long'] * 1000:.2f} ms vs {own['short'] * 1000:.2f} ms, ratio {own_ratio:.2f} "
        f"(target <= 2) {'met' if own_ratio <= 2 else 'MISSED'}"
    )
    print(
        f"  floor, the same two requests from a bare SDK client: {bare['long'] * 1000:.2f} ms vs "
        f"{bare['short'] * 1000:.2f} ms, ratio {bare['long'] / bare['short']:.2f}"
    )
    print(  # what the turn costs beyond the floor's own request (negative: cheaper than a bare client sending it)
        f"  the turn beyond the floor's request: {(long_s - bare['long']) * 1000:+.2f} ms on the long session, "
        f"{(short_s - bare['short']) * 1000:+.2f} ms on the short"
    )
    return ratio


def _sdk_kwargs(body: dict[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in ("model", "max_tokens", "messages", "system", "tools") if k in body}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--calls", type=int, default=200, help="sequential calls for the overhead measure")
    parser.add_argument("--long-messages", type=int, default=3000, help="messages of the long session")
    parser.add_argument("--long-turns", type=int, default=30, help="turns measured on each of long and short")
    args = parser.parse_args()
    configure_logging("warning", "console", stream=sys.stderr)
    daemon = await throughput(args.sessions, args.turns, args.latency_ms / 1000, True)
    floor = await bare_throughput(args.sessions, args.turns, args.latency_ms / 1000)
    verdict = "met" if daemon / floor <= 1.5 else "MISSED"
    print(f"  wall {daemon / floor:.2f}x of the floor's (target <= 1.5x) {verdict}")
    for fsync in (True, False):
        await overhead(args.calls, fsync)
    await long_session(args.long_messages, args.long_turns, True)


if __name__ == "__main__":
    asyncio.run(main())
