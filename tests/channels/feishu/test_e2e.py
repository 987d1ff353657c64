"""End to end: fake Feishu webhook → FeishuChannel → the real gateway → the fake Anthropic LLM, and back."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import aiohttp

from agenthub.config import Settings
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

APP_ID, SECRET, TOKEN, KEY = "cli_e2e", "s3cret-e2e", "vtoken-e2e", "enc-key-e2e"
APP = {"app_id": APP_ID, "app_secret": SECRET, "mode": "webhook", "verification_token": TOKEN, "encrypt_key": KEY}


def _closed(fake: FakeFeishu, cards: int) -> bool:
    return fake.closed_cards() == cards


async def post(h: Harness, text: str, message_id: str) -> float:
    event = message_event(
        f"@_user_1 {text}",
        token=TOKEN,
        app_id=APP_ID,
        chat_type="group",
        chat_id="oc_team",
        message_id=message_id,
        mentions=[mention("@_user_1", bot_open_id(APP_ID), "AgentHub")],
    )
    body = feishu_encrypt(event, KEY)
    headers = feishu_headers(body, KEY)
    started = time.monotonic()
    async with aiohttp.ClientSession() as s, s.post(h.events_url("main"), data=body, headers=headers) as r:
        assert r.status == 200
    return time.monotonic() - started


async def test_streamed_answer_with_llm_latency_then_stop_and_restart_through_mentions(
    settings: Settings, fake_llm: FakeAnthropic, tmp_path: Path
) -> None:
    answer = "你好！我是 AgentHub 助手，很高兴为你服务。"
    fake_llm.script(
        reply_text(answer, chunks=6, first_byte_delay_s=0.3, delta_delay_s=0.05),
        reply_text("long " * 200, chunks=100, delta_delay_s=0.05),
    )
    async with (
        build_gateway(settings) as gateway,
        FakeFeishu({APP_ID: SECRET}) as fake,
        running_channel(fake, tmp_path / "state", {"main": APP}, gateway) as h,
    ):
        acked_in = await post(h, "你好", "om_e2e_1")
        assert acked_in < 0.3  # acknowledged before the model's first token
        await fake.wait_until(lambda: fake.closed_cards() == 1, timeout=10)
        first = fake.card_for_reply("om_e2e_1")
        assert first.content == answer and len(first.updates) >= 2

        await post(h, "write a lot", "om_e2e_2")
        await fake.wait_until(lambda: any(c.updates for c in fake.cards.values() if c.streaming), timeout=10)
        await post(h, "/stop", "om_e2e_3")
        await fake.wait_until(lambda: fake.closed_cards() == 3, timeout=10)
        stopped = fake.card_for_reply("om_e2e_2")
        assert stopped.streaming is False and stopped.content.startswith("long")

        await post(h, "/restart", "om_e2e_4")
        await fake.wait_until(lambda: fake.closed_cards() == 4, timeout=10)
        assert "/restart" in fake.card_for_reply("om_e2e_4").content
    assert fake.sequence_errors == []
    user_texts = [r.body["messages"][-1]["content"] for r in fake_llm.message_requests() if r.body]
    assert len(user_texts) == 2 and "@_user_1" not in str(user_texts)


async def test_odd_sender_ids_are_answered_in_a_group_and_refused_cleanly_where_they_name_the_chat(
    settings: Settings, fake_llm: FakeAnthropic, tmp_path: Path
) -> None:
    """An open id the key rules refuse (a backslash, a newline) is answered in a group; in a DM, where it names the
    chat, and anywhere with NUL, the message gets the invalid-id text (no exception's text), and the next message is
    answered."""
    sent = [("ou_a\\b", "group"), ("ou_a\nb", "group"), ("ou_a\x00b", "group"), ("ou_a\\b", "p2p"), ("ou_ok", "p2p")]
    async with (
        build_gateway(settings) as gateway,
        FakeFeishu({APP_ID: SECRET}) as fake,
        running_channel(fake, tmp_path / "state", {"main": APP}, gateway) as h,
    ):
        for n, (sender, chat_type) in enumerate(sent):
            at = [mention("@_user_1", bot_open_id(APP_ID), "AgentHub")] if chat_type == "group" else None
            event = message_event(
                f"@_user_1 q{n}" if at else f"q{n}",
                token=TOKEN,
                app_id=APP_ID,
                sender=sender,
                chat_type=chat_type,
                chat_id="oc_team" if at else f"oc_dm{n}",
                message_id=f"om_odd_{n}",
                mentions=at,
            )
            body = feishu_encrypt(event, KEY)
            headers = feishu_headers(body, KEY)
            async with aiohttp.ClientSession() as s, s.post(h.events_url("main"), data=body, headers=headers) as r:
                assert r.status == 200
            await fake.wait_until(functools.partial(_closed, fake, n + 1), timeout=10)
        finals = [fake.card_for_reply(f"om_odd_{n}").content for n in range(len(sent))]
    assert [f.startswith("reply to: q") for f in finals] == [True, True, False, False, True], finals
    for refused in finals[2:4]:
        assert "发送者标识" in refused and "\x00" not in refused and "sender_id" not in refused
    assert len(fake_llm.message_requests()) == 3
