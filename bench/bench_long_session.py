"""Long-session benchmark: a turn on a session of 3,000 stored messages against a turn on one of 10, for the real
`agenthub serve` (HTTP channel, history fsync on) and for the floor (a bare aiohttp handler making one
`AsyncAnthropic.messages.create` call with the same system prompt, tools and conversation, kept in memory), in one run.

Every part runs in its own process, as in production: a lean fake Messages API (0 ms; it reads the body but does not
parse it: that is the vendor's work, which on this shared box would be charged to our wall time), the daemon, the
floor, and this driver, which sends the turns one at a time, alternating long and short. Per turn it takes the wall
time and the serving process's CPU time (the sum over its threads of /proc/<pid>/task/<tid>/schedstat, in
nanoseconds), and prints the medians and both ratios (long ÷ short).

Run: `.venv/bin/python bench/bench_long_session.py [--messages 3000] [--turns 30]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp
from aiohttp import web
from bench_http import _cpu_s, _start_daemon, _start_floor, _stop  # the daemon and floor the HTTP benchmark runs

from agenthub.session_keys import session_key
from agenthub.storage import jsonl
from agenthub.storage.paths import AgentLayout

CHATS = ("long", "short")
SHORT_MESSAGES = 10
TARGET = 2.0


@dataclass
class Side:
    name: str
    wall_ms: dict[str, float]
    cpu_ms: dict[str, float]

    def ratio(self, of: dict[str, float]) -> float:
        return of["long"] / of["short"]


def _task_cpu_ns(pid: int) -> dict[int, int]:
    """CPU nanoseconds each live thread of `pid` has run (schedstat: exact, unlike the 10-ms ticks of /proc stat)."""
    spent = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            spent[int(task.name)] = int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
    return spent


def _cpu_since(pid: int, before: dict[int, int]) -> float:
    after = _task_cpu_ns(pid)
    return sum(ns - before.get(tid, 0) for tid, ns in after.items()) / 1e9


def seed_daemon(root: Path, messages: int) -> None:
    """The long and the short session of the HTTP channel, written straight to their history files."""
    layout = AgentLayout(root / "data", "default")
    for chat, count in zip(CHATS, (messages, SHORT_MESSAGES), strict=True):
        records = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} of {chat}", "timestamp": 1_000 + i}
            for i in range(count)
        ]
        jsonl.append_records(layout.history_file(session_key("default", "http", chat)), records, fsync=False)


async def _turns(pid: int, url: str, headers: dict[str, str], turns: int) -> tuple[dict[str, float], ...]:
    """One warm-up turn per chat (the daemon loads the file), then `turns` alternating turns: median wall and CPU."""
    wall: dict[str, list[float]] = {chat: [] for chat in CHATS}
    cpu: dict[str, list[float]] = {chat: [] for chat in CHATS}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:

        async def turn(chat: str, n: int) -> tuple[float, float]:
            before, began = _task_cpu_ns(pid), time.perf_counter()
            body = {"chat_id": chat, "content": f"turn {n} on {chat}"}
            async with session.post(url, json=body, headers=headers) as resp:
                await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"{chat}: status {resp.status}")
            return time.perf_counter() - began, _cpu_since(pid, before)

        for chat in CHATS:
            await turn(chat, 0)
        await asyncio.sleep(1)
        loop_before = _task_cpu_ns(pid)
        for n in range(1, turns + 1):
            for chat in CHATS:
                w, c = await turn(chat, n)
                wall[chat].append(w * 1000)
                cpu[chat].append(c * 1000)
        await asyncio.sleep(1)
    outside = _cpu_since(pid, loop_before) - sum(map(sum, cpu.values())) / 1000
    print(
        f"  CPU of the serving process outside the turns' windows (between them and 1 s after): {outside * 1000:.0f} ms"
    )
    return {c: statistics.median(v) for c, v in wall.items()}, {c: statistics.median(v) for c, v in cpu.items()}


def _start_fake(dump: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The fake Messages API in its own process; on SIGTERM it writes the last request body of each chat to `dump`."""
    child = subprocess.Popen([sys.executable, __file__, "--fake-server", str(dump)], stdout=subprocess.PIPE)
    assert child.stdout is not None
    return child, f"http://127.0.0.1:{int(child.stdout.readline())}"


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


REPLY = "ok"
USAGE = {"input_tokens": 1000, "output_tokens": 1, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant", "model": "fake", "stop_sequence": None}
STREAM = b"".join(
    [
        _sse("message_start", {"type": "message_start", "message": {**MESSAGE, "content": [], "usage": USAGE}}),
        _sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}),
        _sse(
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": REPLY}},
        ),
        _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": USAGE}),
        _sse("message_stop", {"type": "message_stop"}),
    ]
)
WHOLE = {**MESSAGE, "content": [{"type": "text", "text": REPLY}], "stop_reason": "end_turn", "usage": USAGE}


def _fake_app(last: dict[str, bytes]) -> web.Application:
    """A lean vendor: the body is read (not parsed: that is the vendor's work, not the caller's) and one fixed reply
    goes back, streamed when the body asks for it. The last body of each chat is kept for the floor."""

    async def messages(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        tail = raw[-4096:]
        for chat in CHATS:
            if f" on {chat}".encode() in tail:
                last[chat] = raw
        if b'"stream":true' not in raw and b'"stream": true' not in raw:
            return web.json_response(WHOLE)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(STREAM)
        await response.write_eof()
        return response

    async def count_tokens(request: web.Request) -> web.Response:
        return web.json_response({"input_tokens": len(await request.read()) // 4})

    app = web.Application(client_max_size=256 * 1024 * 1024)
    app.router.add_post("/v1/messages", messages)
    app.router.add_post("/v1/messages/count_tokens", count_tokens)
    return app


async def _serve_fake(dump: Path) -> None:
    last: dict[str, bytes] = {}
    runner = web.AppRunner(_fake_app(last), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    print(runner.addresses[0][1], flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await runner.cleanup()
    bodies = {chat: json.loads(raw) for chat, raw in last.items()}
    await asyncio.to_thread(dump.write_text, json.dumps(bodies))


def _measure_daemon(root: Path, messages: int, turns: int) -> tuple[Side, dict[str, Any]]:
    seed_daemon(root, messages)
    fake, llm_url = _start_fake(root / "daemon-requests.json")
    try:
        child, port, token, _ = _start_daemon(root, llm_url, True)
        try:
            url = f"http://127.0.0.1:{port}/api/agents/default/chat"
            cpu_before = _cpu_s(child.pid)
            wall, cpu = asyncio.run(_turns(child.pid, url, {"Authorization": f"Bearer {token}"}, turns))
            ticks = _cpu_s(child.pid) - cpu_before
        finally:
            _stop(child)
    finally:
        _stop(fake)
    bodies: dict[str, Any] = json.loads((root / "daemon-requests.json").read_text())
    sent = len(bodies["long"]["messages"])
    note = "" if sent >= messages else f" (history compacted: the last request held {sent} messages, not comparable)"
    print(f"agenthub serve: the last long request held {sent} messages{note}; CPU by /proc stat ticks {ticks:.2f} s")
    return Side("agenthub", wall, cpu), bodies


def _measure_floor(root: Path, bodies: dict[str, Any], turns: int) -> Side:
    """The floor, its conversations seeded with what the daemon last sent for each chat (and a reply to it)."""
    conversations = {
        chat: [*bodies[chat]["messages"], {"role": "assistant", "content": "ok"}] for chat in CHATS if chat in bodies
    }
    prefix = root / "floor-prefix.json"
    long_body = bodies["long"]
    prefix.write_text(
        json.dumps(
            {"system": long_body.get("system", []), "tools": long_body.get("tools", []), "conversations": conversations}
        )
    )
    fake, llm_url = _start_fake(root / "floor-requests.json")
    try:
        child, port, _ = _start_floor(llm_url, prefix)
        try:
            wall, cpu = asyncio.run(_turns(child.pid, f"http://127.0.0.1:{port}/chat", {}, turns))
        finally:
            _stop(child)
    finally:
        _stop(fake)
    return Side("floor", wall, cpu)


def _report(sides: list[Side], messages: int) -> None:
    for side in sides:
        wall, cpu = side.wall_ms, side.cpu_ms
        print(
            f"{side.name:>8}: {messages} messages: wall {wall['long']:6.2f} ms, CPU {cpu['long']:6.2f} ms;  "
            f"{SHORT_MESSAGES} messages: wall {wall['short']:6.2f} ms, CPU {cpu['short']:6.2f} ms;  "
            f"ratio wall {side.ratio(wall):.2f}, CPU {side.ratio(cpu):.2f}"
        )
    ours = sides[0]
    for what, of in (("CPU", ours.cpu_ms), ("wall", ours.wall_ms)):
        ratio = ours.ratio(of)
        verdict = "met" if ratio <= TARGET else "MISSED"
        print(
            f"  agenthub turn at {messages} ÷ at {SHORT_MESSAGES}, {what}: {ratio:.2f} "
            f"(target <= {TARGET:.0f}) {verdict}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=3000, help="stored messages of the long session")
    parser.add_argument("--turns", type=int, default=30, help="turns measured on each of long and short")
    parser.add_argument("--fake-server", metavar="DUMP", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fake_server:
        asyncio.run(_serve_fake(Path(args.fake_server)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        daemon, bodies = _measure_daemon(root, args.messages, args.turns)
        floor = _measure_floor(root, bodies, args.turns)
    _report([daemon, floor], args.messages)


if __name__ == "__main__":
    main()
