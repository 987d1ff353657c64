"""HTTP benchmark: `agenthub serve` against the floor, each in its own process, measured in the same run.

The floor is a bare aiohttp handler making one non-streaming `AsyncAnthropic.messages.create` call on the SDK's aiohttp
transport (`DefaultAioHttpClient`) with the daemon's system prompt, tools and conversation (kept in memory). Both
servers answer POST chat from the same load (20 clients by default) against the same zero-latency fake Messages API;
the fake and the load generator run on their own threads in this process, each server in a child process, so the
server's CPU time per turn is read from its /proc stat before and after the measured load. The daemon is the real
`agenthub serve` with the HTTP channel (history fsync on unless --no-fsync); its start-up is timed up to its systemd
READY=1. Run: `.venv/bin/python bench/bench_http.py`; `--profile OUT` also records the daemon with py-spy during the
measured load (`.venv/bin/pip install py-spy`; raw collapsed stacks, one line per stack with its sample count).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from aiohttp import web
from anthropic import AsyncAnthropic, DefaultAioHttpClient

from agenthub.storage.tokens import TokenStore
from tests.support.fakes.anthropic import FakeAnthropic

ROOT = Path(__file__).resolve().parent.parent
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


class LoopThread:
    """An event loop on its own thread, for a component that must not share the measured loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Awaitable[Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()  # type: ignore[arg-type]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()


@dataclass
class Result:
    name: str
    rps: float
    p50_ms: float
    p99_ms: float
    cpu_ms_per_turn: float
    started_s: float


def _cpu_s(pid: int) -> float:
    """utime + stime of the process (all its threads), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


async def _load(url: str, headers: dict[str, str], clients: int, requests: int) -> tuple[float, list[float]]:
    latencies: list[float] = []
    counter = iter(range(requests))
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def client(worker: int) -> None:
            for n in counter:
                began = time.perf_counter()
                body = {"chat_id": f"c{worker}", "content": f"request {n}"}
                async with session.post(url, json=body, headers=headers) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"status {resp.status}")
                latencies.append(time.perf_counter() - began)

        began = time.perf_counter()
        await asyncio.gather(*(client(i) for i in range(clients)))
        return time.perf_counter() - began, latencies


def _measure(
    name: str, pid: int, url: str, headers: dict[str, str], args: argparse.Namespace, load: LoopThread, started_s: float
) -> Result:
    load.run(_load(url, headers, args.clients, 100))  # warm-up
    spy = _spy(pid, args.profile) if args.profile and name == "agenthub" else None
    cpu_before = _cpu_s(pid)
    wall, latencies = load.run(_load(url, headers, args.clients, args.requests))
    cpu = _cpu_s(pid) - cpu_before
    if spy is not None:
        spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        spy.wait(timeout=60)
    ordered = sorted(latencies)
    result = Result(
        name,
        len(latencies) / wall,
        statistics.median(ordered) * 1000,
        ordered[int(len(ordered) * 0.99) - 1] * 1000,
        cpu / len(latencies) * 1000,
        started_s,
    )
    print(
        f"{name:>8}: {result.rps:7.1f} req/s  p50 {result.p50_ms:6.1f} ms  p99 {result.p99_ms:6.1f} ms  "
        f"cpu {result.cpu_ms_per_turn:5.2f} ms/turn  start {started_s:5.2f} s  ({len(latencies)} requests)"
    )
    return result


def _spy(pid: int, out: str) -> subprocess.Popen[bytes]:
    """py-spy recording `pid` (all threads, idle ones left out) into `out` as raw collapsed stacks until stopped."""
    spy = Path(sys.executable).parent / "py-spy"
    command = [str(spy), "record", "--pid", str(pid), "--format", "raw", "--output", out, "--rate", "200"]
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached before the measured load starts
    return child


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(child: subprocess.Popen[bytes]) -> None:
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _start_daemon(root: Path, llm_url: str, fsync: bool) -> tuple[subprocess.Popen[bytes], int, str, float]:
    """`agenthub serve` with the HTTP channel; returns it, its port, a token and the seconds until READY=1."""
    notify_path = root / "notify.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    notify.settimeout(30)
    token = TokenStore(root / "auth").create("bench")
    port = _free_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(ROOT),
        "HOME": str(root),
        "NO_PROXY": "127.0.0.1,localhost",
        "NOTIFY_SOCKET": str(notify_path),
        "AGENTHUB_DATA_DIR": str(root / "data"),
        "AGENTHUB_AGENTS_DIR": str(root / "agents"),
        "AGENTHUB_AUTH_DIR": str(root / "auth"),
        "AGENTHUB_WORKSPACE_DIR": str(root / "workspace"),
        "AGENTHUB_HTTP__PORT": str(port),
        "AGENTHUB_LLM__BASE_URL": llm_url,
        "AGENTHUB_LLM__API_KEY": "bench-key",
        "AGENTHUB_LLM__MAX_RETRIES": "0",
        "AGENTHUB_SESSION__FSYNC": "true" if fsync else "false",
        "AGENTHUB_LOG_LEVEL": "error",
        "AGENTHUB_LOG_FORMAT": "json",
    }
    began = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "agenthub", "serve"], env=env, cwd=root, stdout=subprocess.DEVNULL, stderr=sys.stderr
    )
    try:
        while b"READY=1" not in notify.recv(4096).split(b"\n"):
            pass
    finally:
        notify.close()
    return child, port, token, time.perf_counter() - began


def _start_floor(llm_url: str, prefix: Path) -> tuple[subprocess.Popen[bytes], int, float]:
    began = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, __file__, "--floor-server", llm_url, str(prefix)], stdout=subprocess.PIPE, stderr=sys.stderr
    )
    assert child.stdout is not None
    port = int(child.stdout.readline())
    return child, port, time.perf_counter() - began


def _floor_app(base_url: str, prefix: dict[str, Any]) -> web.Application:
    """The floor: the daemon's call (its system prompt and tools, taken from its last request, and the conversation
    so far, kept in memory, starting from `prefix["conversations"]` when given) as one non-streaming create, with no
    auth, validation, queueing or disk."""
    client = AsyncAnthropic(base_url=base_url, api_key="k", max_retries=0, http_client=DefaultAioHttpClient())
    conversations: dict[str, list[Any]] = dict(prefix.get("conversations", {}))

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        messages = conversations.setdefault(body["chat_id"], [])
        messages.append({"role": "user", "content": body["content"]})
        message = await client.messages.create(
            model="m", max_tokens=256, messages=messages, system=prefix["system"], tools=prefix["tools"]
        )
        text = "".join(b.text for b in message.content if b.type == "text")
        messages.append({"role": "assistant", "content": text})
        return web.json_response({"reply": text})

    async def close_client(_: web.Application) -> None:
        await client.close()

    app = web.Application()
    app.router.add_post("/chat", chat)
    app.on_cleanup.append(close_client)
    return app


async def _serve_floor(base_url: str, prefix_file: Path) -> None:
    """The floor's child process: print the port, serve until SIGTERM."""
    prefix = json.loads(await asyncio.to_thread(prefix_file.read_text))
    runner = web.AppRunner(_floor_app(base_url, prefix), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(runner.addresses[0][1], flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await runner.cleanup()


def _ratios(daemon: Result, floor: Result, fsync: bool, ready_limit_s: float) -> None:
    throughput, p99, cpu = (
        daemon.rps / floor.rps,
        daemon.p99_ms / floor.p99_ms,
        daemon.cpu_ms_per_turn / floor.cpu_ms_per_turn,
    )

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    print(f"   ratio (fsync {'on' if fsync else 'off'}, per-session history on disk):")
    print(f"     throughput {throughput:.2f}x of the floor (target >= 0.5x) {verdict(throughput >= 0.5)}")
    p50 = daemon.p50_ms / floor.p50_ms
    print(f"     p99 {p99:.2f}x of the floor's (target <= 2x) {verdict(p99 <= 2)}; p50 {p50:.2f}x")
    print(f"     daemon CPU per turn {cpu:.2f}x of the floor's (target <= 2.5x) {verdict(cpu <= 2.5)}")
    ready, limit = daemon.started_s, ready_limit_s
    print(f"     agenthub serve READY in {ready:.2f} s (target <= {limit:.0f} s) {verdict(ready <= limit)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--no-fsync", action="store_true", help="turn off history fsync (session.fsync=false)")
    parser.add_argument(
        "--profile", metavar="OUT", help="py-spy record the daemon during the measured load (raw stacks to OUT)"
    )
    parser.add_argument("--floor-server", nargs=2, metavar=("LLM_URL", "PREFIX_FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor_server:
        asyncio.run(_serve_floor(args.floor_server[0], Path(args.floor_server[1])))
        return
    llm_thread, load_thread = LoopThread(), LoopThread()
    fake = FakeAnthropic()
    llm_thread.run(fake.start())
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            child, port, token, ready_s = _start_daemon(root, fake.base_url, not args.no_fsync)
            try:
                url = f"http://127.0.0.1:{port}/api/agents/default/chat"
                daemon = _measure(
                    "agenthub", child.pid, url, {"Authorization": f"Bearer {token}"}, args, load_thread, ready_s
                )
            finally:
                _stop(child)
            prefix = root / "prefix.json"
            body = fake.message_requests()[-1].body or {}
            prefix.write_text(json.dumps({"system": body.get("system", []), "tools": body.get("tools", [])}))
            floor_child, floor_port, floor_started = _start_floor(fake.base_url, prefix)
            try:
                floor_url = f"http://127.0.0.1:{floor_port}/chat"
                floor = _measure("floor", floor_child.pid, floor_url, {}, args, load_thread, floor_started)
            finally:
                _stop(floor_child)
    finally:
        llm_thread.run(fake.stop())
        for thread in (load_thread, llm_thread):
            thread.close()
    _ratios(daemon, floor, not args.no_fsync, 1.0)


if __name__ == "__main__":
    main()
