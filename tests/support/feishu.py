"""A Feishu webhook app against the fake Feishu: its app table, a harness on it, posting events, reading replies."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from tests.support.fakes.feishu import (
    FakeCard,
    FakeFeishu,
    Harness,
    bot_open_id,
    feishu_encrypt,
    feishu_headers,
    running_channel,
)

APP_ID, SECRET, TOKEN, KEY = "cli_web1", "s3cret-web1", "vtoken-1", "enc-key-1"
APP = {"app_id": APP_ID, "app_secret": SECRET, "mode": "webhook", "verification_token": TOKEN, "encrypt_key": KEY}
BOT = bot_open_id(APP_ID)


@asynccontextmanager
async def harness(
    tmp_path: Path, gateway: Any, apps: dict[str, dict[str, Any]] | None = None, secrets: dict[str, str] | None = None
) -> AsyncIterator[Harness]:
    async with (
        FakeFeishu(secrets or {APP_ID: SECRET}) as fake,
        running_channel(fake, tmp_path, apps or {"main": APP}, gateway) as h,
    ):
        yield h


async def post_event(
    h: Harness,
    payload: dict[str, Any],
    *,
    key: str = KEY,
    sign: bool = True,
    lowercase: bool = False,
    sent_at: float | None = None,
) -> tuple[int, dict[str, Any]]:
    body = feishu_encrypt(payload, key)
    plain = {"Content-Type": "application/json"}
    headers = feishu_headers(body, KEY, lowercase=lowercase, sent_at=sent_at) if sign else plain
    async with aiohttp.ClientSession() as s, s.post(h.events_url("main"), data=body, headers=headers) as r:
        return r.status, await r.json(content_type=None)


def cards_for(fake: FakeFeishu, message_id: str) -> list[FakeCard]:
    """The cards replying to `message_id`, in the order they were sent."""
    sent = [m for m in fake.replies() if m.target == message_id and m.msg_type == "interactive"]
    return [fake.cards[m.content["data"]["card_id"]] for m in sent]


def plain_replies(fake: FakeFeishu, message_id: str) -> list[Any]:
    return [m for m in fake.replies() if m.target == message_id and m.msg_type != "interactive"]
