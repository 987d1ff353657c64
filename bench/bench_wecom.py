"""WeCom callback acknowledgement latency at 50 concurrent callbacks: slow fake LLM vs. no LLM at all."""

from __future__ import annotations

import asyncio
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agenthub.gateway.handle import ReplyHandle
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent, InboundMessage
from channels.wecom import WeComChannel
from tests.support.fakes.anthropic import FakeAnthropic, reply_text
from tests.support.fakes.wecom import (
    FakeQyApi,
    channel_context,
    make_aes_key,
    serve_routes,
    signed_callback,
    text_message_xml,
)
from tests.support.roots import make_settings

CONCURRENCY = 50
ROUNDS = 8
LLM_DELAY_S = 5.0
CORP_ID, SECRET, TOKEN, AES_KEY = "wwbench0000000000", "bench-secret", "bench-token", make_aes_key()


class NoLLM:
    """The baseline gateway: answers at once, no model involved."""

    async def submit(self, message: InboundMessage) -> ReplyHandle:
        handle = ReplyHandle("default:wecom:" + message.chat_id)
        handle.emit(DoneEvent("ok"))
        return handle


def table(api: FakeQyApi) -> dict[str, Any]:
    app = {"corp_id": CORP_ID, "agent_id": 1, "secret": SECRET, "token": TOKEN, "encoding_aes_key": AES_KEY}
    return {"apps": {"bench": {**app, "api_base": api.url}}}


async def fire(http: aiohttp.ClientSession, url: Any, msg_id: int, user: str) -> float:
    xml = text_message_xml(corp_id=CORP_ID, user=user, content=f"问题 {msg_id}", msg_id=msg_id)
    query, body = signed_callback(xml, token=TOKEN, aes_key=AES_KEY, corp_id=CORP_ID)
    started = time.perf_counter()
    async with http.post(url.with_query(query), data=body) as resp:
        await resp.read()
        assert resp.status == 200, resp.status
    return time.perf_counter() - started


async def one_round(http: aiohttp.ClientSession, url: Any, first_id: int) -> list[float]:
    jobs = [fire(http, url, first_id + i, f"user{first_id + i}") for i in range(CONCURRENCY)]
    return list(await asyncio.gather(*jobs))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@asynccontextmanager
async def llm_in_own_thread() -> AsyncIterator[FakeAnthropic]:
    """The fake LLM runs on its own thread and loop, like a remote vendor: its work never sits on our loop."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def make() -> FakeAnthropic:
        fake = FakeAnthropic(first_byte_delay_s=LLM_DELAY_S, responder=lambda body: reply_text("好的，这是回答。"))
        await fake.start()
        return fake

    fake = asyncio.run_coroutine_threadsafe(make(), loop).result(timeout=10)
    try:
        yield fake
    finally:
        asyncio.run_coroutine_threadsafe(fake.stop(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)


async def main() -> None:
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    root = Path(tempfile.mkdtemp(prefix="bench_wecom_"))
    async with llm_in_own_thread() as llm:
        settings = make_settings(
            root,
            llm={"base_url": llm.base_url, "api_key": "bench", "timeout_s": 30},
            session={"fsync": False, "max_concurrent_llm": 1024},
        )
        slow_api, fast_api = await FakeQyApi(CORP_ID, SECRET).start(), await FakeQyApi(CORP_ID, SECRET).start()
        async with build_gateway(settings) as gateway, aiohttp.ClientSession() as http:
            slow_ctx = channel_context(gateway, root / "slow", settings)
            fast_ctx = channel_context(NoLLM(), root / "fast", settings)
            slow, fast = WeComChannel(slow_ctx, table(slow_api)), WeComChannel(fast_ctx, table(fast_api))
            await slow.start()
            await fast.start()
            slow_srv, fast_srv = await serve_routes(slow_ctx), await serve_routes(fast_ctx)
            lat: dict[str, list[float]] = {"slow": [], "none": []}
            for r in range(ROUNDS):  # alternate, so drift hits both sides alike
                lat["none"] += await one_round(http, fast_srv.make_url("/wecom/bench/callback"), 10_000 * r)
                lat["slow"] += await one_round(http, slow_srv.make_url("/wecom/bench/callback"), 10_000 * r)
            total = ROUNDS * CONCURRENCY
            waited = time.perf_counter()
            await slow_api.wait_for(lambda: len(slow_api.sends) == total, timeout=45)
            drained = time.perf_counter() - waited
            report(lat, total, len(slow_api.sends), drained)
            for channel in (slow, fast):
                await channel.stop()
            for srv in (slow_srv, fast_srv):
                await srv.close()
        await slow_api.close()
        await fast_api.close()


def report(lat: dict[str, list[float]], total: int, delivered: int, drained: float) -> None:
    ms = {k: (pct(v, 0.5) * 1000, pct(v, 0.99) * 1000, statistics.mean(v) * 1000) for k, v in lat.items()}
    print(f"wecom callback ack, {CONCURRENCY} concurrent x {ROUNDS} rounds, fake LLM first byte {LLM_DELAY_S}s")
    for name, label in (("none", "baseline (no LLM)"), ("slow", "slow fake LLM")):
        p50, p99, mean = ms[name]
        print(f"  {label:18} p50 {p50:7.2f} ms  p99 {p99:7.2f} ms  mean {mean:7.2f} ms")
    p50_ratio, p99_ratio = ms["slow"][0] / ms["none"][0], ms["slow"][1] / ms["none"][1]
    print(f"  ratio slow/baseline: p50 {p50_ratio:.2f}  p99 {p99_ratio:.2f}  (about 1: the ack never waits)")
    print(f"  slow-LLM replies delivered by message/send: {delivered}/{total}, {drained:.1f}s after the last ack")


if __name__ == "__main__":
    asyncio.run(main())
