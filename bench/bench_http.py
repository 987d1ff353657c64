"""HTTP benchmark: POST /chat at 50 concurrent clients (zero-latency fake LLM) vs a bare aiohttp handler floor.

Three event loops on three threads: the fake Messages API, the server under test, and the load generator, the same
for both servers, so the ratio shows what the daemon's stack (auth, validation, gateway, history on disk) costs over
the floor of one handler making the same single streaming call with the same conversation (kept in memory).
Run: `.venv/bin/python bench/bench_http.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from aiohttp import web
from anthropic import AsyncAnthropic, DefaultAioHttpClient

from agenthub.app import build_gateway
from agenthub.daemon import assemble
from agenthub.log import configure_logging
from agenthub.tokens import TokenStore
from tests.fakes.anthropic import FakeAnthropic
from tests.roots import make_settings


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


def _bare_app(base_url: str, prefix: dict[str, Any]) -> tuple[web.Application, Callable[[], Awaitable[None]]]:
    """The floor: the same call the daemon makes (its system prompt and tools, taken from its last request, and
    the conversation so far, kept in memory), with no auth, validation, queueing or disk."""
    client = AsyncAnthropic(base_url=base_url, api_key="k", max_retries=0, http_client=DefaultAioHttpClient())
    conversations: dict[str, list[Any]] = {}

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        messages = conversations.setdefault(body["chat_id"], [])
        messages.append({"role": "user", "content": body["content"]})
        async with client.messages.stream(
            model="m", max_tokens=256, messages=messages, system=prefix["system"], tools=prefix["tools"]
        ) as stream:
            message = await stream.get_final_message()
        text = "".join(b.text for b in message.content if b.type == "text")
        messages.append({"role": "assistant", "content": text})
        return web.json_response({"reply": text})

    app = web.Application()
    app.router.add_post("/chat", chat)
    return app, client.close


async def _serve(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, runner.addresses[0][1]


def _report(name: str, wall: float, latencies: list[float]) -> tuple[float, float, float]:
    ordered = sorted(latencies)
    rps = len(latencies) / wall
    p50 = statistics.median(ordered) * 1000
    p99 = ordered[int(len(ordered) * 0.99) - 1] * 1000
    print(f"{name:>8}: {rps:7.1f} req/s  p50 {p50:6.1f} ms  p99 {p99:6.1f} ms  ({len(latencies)} requests)")
    return rps, p50, p99


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--no-fsync", action="store_true", help="turn off history fsync (session.fsync=false)")
    args = parser.parse_args()
    configure_logging("error", "json", stream=open("/dev/null", "w"))  # noqa: SIM115 - silence the daemon's logs

    llm_thread, server_thread, load_thread = LoopThread(), LoopThread(), LoopThread()
    fake = FakeAnthropic()
    llm_thread.run(fake.start())
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            settings = make_settings(
                root,
                llm={"base_url": fake.base_url, "api_key": "k", "max_retries": 0},
                http={"port": 0},
                session={"fsync": not args.no_fsync},
            )
            token = TokenStore(settings.auth_dir).create("bench")

            async def start_daemon() -> tuple[Any, Any]:
                gateway = build_gateway(settings)
                await gateway.__aenter__()
                server, _ = assemble(settings, gateway)
                await server.start()
                return gateway, server

            gateway, server = server_thread.run(start_daemon())
            url = f"http://127.0.0.1:{server.port}/api/agents/default/chat"
            headers = {"Authorization": f"Bearer {token}"}
            load_thread.run(_load(url, headers, args.clients, 100))  # warm-up
            daemon = _report("agenthub", *load_thread.run(_load(url, headers, args.clients, args.requests)))
            server_thread.run(server.close())
            server_thread.run(gateway.__aexit__(None, None, None))

            async def start_bare() -> tuple[web.AppRunner, int, Callable[[], Awaitable[None]]]:
                recorded = fake.message_requests()[-1].body or {}
                app, close = _bare_app(fake.base_url, recorded)
                runner, port = await _serve(app)
                return runner, port, close

            runner, port, close = server_thread.run(start_bare())
            bare_url = f"http://127.0.0.1:{port}/chat"
            load_thread.run(_load(bare_url, {}, args.clients, 100))
            bare = _report("bare", *load_thread.run(_load(bare_url, {}, args.clients, args.requests)))
            server_thread.run(runner.cleanup())
            server_thread.run(close())
    finally:
        llm_thread.run(fake.stop())
        for thread in (load_thread, server_thread, llm_thread):
            thread.close()
    print(
        f"   ratio: throughput {daemon[0] / bare[0]:.2f}x of bare, "
        f"p50 {daemon[1] / bare[1]:.2f}x, p99 {daemon[2] / bare[2]:.2f}x  (fsync on, per-session history on disk)"
    )


if __name__ == "__main__":
    main()
