"""Feishu: event receipt → first streaming-card update at 20 concurrent group messages, vs. the fake LLM's TTFT."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from anthropic import AsyncAnthropic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agenthub.hosting.app import build_gateway
from tests.support.fakes.anthropic import FakeAnthropic, reply_text
from tests.support.fakes.feishu import (
    FakeFeishu,
    Harness,
    bot_open_id,
    feishu_encrypt,
    feishu_headers,
    mention,
    message_event,
    running_channel,
)
from tests.support.roots import make_settings

CONCURRENCY = 20
ROUNDS = 3
FIRST_TOKEN_S = 0.3
DELTA_S = 0.03
FEISHU_LATENCY_S = 0.02
APP_ID, SECRET, TOKEN, KEY = "cli_bench", "bench-secret", "bench-token", "bench-key"
APP = {"app_id": APP_ID, "app_secret": SECRET, "mode": "webhook", "verification_token": TOKEN, "encrypt_key": KEY}
ANSWER = "这是一段用于测量流式卡片首次更新延迟的回答，" * 4


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def llm_ttft(llm: FakeAnthropic) -> list[float]:
    """The baseline: the fake LLM's own time to first text delta, same concurrency, same script."""
    client = AsyncAnthropic(base_url=llm.base_url, api_key="bench", max_retries=0)

    async def one() -> float:
        started = time.perf_counter()
        async with client.messages.stream(
            model="bench", max_tokens=256, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            async for _ in stream.text_stream:
                first = time.perf_counter() - started
                break
            await stream.close()
        return first

    try:
        return list(await asyncio.gather(*(one() for _ in range(CONCURRENCY))))
    finally:
        await client.close()


async def fire(http: aiohttp.ClientSession, h: Harness, round_no: int, i: int) -> tuple[str, float, float]:
    message_id = f"om_bench_{round_no}_{i}"
    event = message_event(
        f"@_user_1 问题 {i}",
        token=TOKEN,
        app_id=APP_ID,
        chat_type="group",
        chat_id="oc_bench",
        sender=f"ou_member_{i}",
        message_id=message_id,
        mentions=[mention("@_user_1", bot_open_id(APP_ID), "Bot")],
    )
    body = feishu_encrypt(event, KEY)
    headers = feishu_headers(body, KEY)
    sent_at = time.monotonic()
    async with http.post(h.events_url("main"), data=body, headers=headers) as resp:
        assert resp.status == 200, resp.status
    return message_id, sent_at, time.monotonic() - sent_at


@dataclass
class Round:
    firsts: list[float] = field(default_factory=list)
    acks: list[float] = field(default_factory=list)
    per_turn: list[Counter[str]] = field(default_factory=list)
    """Card update calls Feishu accepted for each turn's card, by kind."""


async def feishu_round(http: aiohttp.ClientSession, h: Harness, round_no: int, into: Round) -> None:
    fired = await asyncio.gather(*(fire(http, h, round_no, i) for i in range(CONCURRENCY)))
    fake = h.fake
    before = round_no * CONCURRENCY  # every earlier round's cards were closed before this one started
    await fake.wait_until(lambda: fake.closed_cards() >= before + CONCURRENCY, 30)
    for message_id, sent_at, ack in fired:
        card = fake.card_for_reply(message_id)
        shown_at = card.first_shown_at()  # a content snapshot, or the closing full update for a short answer
        assert shown_at is not None, message_id
        into.firsts.append(shown_at - sent_at)
        into.acks.append(ack)
        kinds = {"content": len(card.updates), "full": len(card.full_updates), "settings": len(card.settings)}
        into.per_turn.append(Counter(kinds))


async def main() -> None:
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
    root = Path(tempfile.mkdtemp(prefix="bench_feishu_"))
    os.chdir(root)
    async with FakeAnthropic(first_byte_delay_s=FIRST_TOKEN_S, delta_delay_s=DELTA_S) as llm:
        llm.responder = lambda body: reply_text(ANSWER, chunks=12)
        settings = make_settings(
            root,
            llm={"base_url": llm.base_url, "api_key": "bench", "timeout_s": 30},
            session={"fsync": False},
        )
        app: dict[str, Any] = {**APP, "group_session_scope": "group_sender"}
        measured = Round()
        ttft: list[float] = []
        async with (
            build_gateway(settings) as gateway,
            FakeFeishu({APP_ID: SECRET}, latency_s=FEISHU_LATENCY_S) as fake,
            running_channel(fake, root / "state", {"main": app}, gateway) as h,
            aiohttp.ClientSession() as http,
        ):
            await llm_ttft(llm)  # warm-up round (connections, sessions, agent loading), not counted
            await feishu_round(http, h, 0, Round())
            for r in range(1, ROUNDS + 1):  # alternate, so drift hits both sides alike
                ttft += await llm_ttft(llm)
                await feishu_round(http, h, r, measured)
            await fake.wait_until(lambda: fake.closed_cards() == (ROUNDS + 1) * CONCURRENCY, 30)
            errors = len(fake.sequence_errors)
            attempts = Counter(op for op, _, _ in fake.calls if op in ("card_content", "card_update", "card_settings"))
    report(measured, ttft, errors, attempts)


def report(measured: Round, ttft: list[float], seq_errors: int, attempts: Counter[str]) -> None:
    ms = 1000.0
    firsts, acks = measured.firsts, measured.acks
    f50, f99, t50, t99 = pct(firsts, 0.5), pct(firsts, 0.99), pct(ttft, 0.5), pct(ttft, 0.99)
    print(
        f"feishu webhook -> first CardKit update, {CONCURRENCY} concurrent group messages x {ROUNDS} rounds "
        "(+1 warm-up), "
        f"fake LLM first token {FIRST_TOKEN_S}s, fake Feishu {FEISHU_LATENCY_S * ms:.0f} ms per call"
    )
    print(f"  baseline: fake LLM time to first token  p50 {t50 * ms:7.1f} ms   p99 {t99 * ms:7.1f} ms")
    print(f"  event receipt -> first card update       p50 {f50 * ms:7.1f} ms   p99 {f99 * ms:7.1f} ms")
    print(f"  ratio (first update / LLM TTFT)          p50 {f50 / t50:7.2f}      p99 {f99 / t99:7.2f}")
    a50, a99 = pct(acks, 0.5), pct(acks, 0.99)
    print(f"  webhook ack                              p50 {a50 * ms:7.1f} ms   p99 {a99 * ms:7.1f} ms")
    print(f"  cards closed: {len(firsts)}, sequence errors: {seq_errors}")
    totals = [sum(c.values()) for c in measured.per_turn]
    kinds = sum(measured.per_turn, Counter())
    turns = len(measured.per_turn)
    by_kind = ", ".join(f"{k} {kinds[k] / turns:.2f}" for k in ("content", "full", "settings"))
    print(f"  card updates per turn (accepted)         mean {sum(totals) / turns:5.2f}  max {max(totals)}  ({by_kind})")
    print(f"  card update requests, all rounds incl. warm-up: {dict(sorted(attempts.items()))}")


if __name__ == "__main__":
    asyncio.run(main())
