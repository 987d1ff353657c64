"""One CardKit streaming card per turn: full-text updates, rising sequence, closed by one full card update."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from agenthub import i18n
from channels.feishu.api import FeishuApi, FeishuApiError, Pace

log = structlog.get_logger(__name__)

ELEMENT_ID = "md_1"
PLACEHOLDER = "…"
CLOSE_TIMEOUT_S = 15.0


def idempotency_key(*parts: str) -> str:
    """A deterministic `uuid` for a send, so a retried request cannot post twice."""
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]


def build_card(text: str, *, streaming: bool, locale: str) -> dict[str, Any]:
    """The turn's card (JSON 2.0), the one shape both for creating it and for the closing full update:
    only the markdown text, the streaming flag and the chat-list summary derived from them differ."""
    summary = i18n.text("channel.generating", locale) if streaming else preview(text)
    return {
        "schema": "2.0",
        "config": {
            "streaming_mode": streaming,
            "update_multi": True,
            "summary": {"content": summary},
            "streaming_config": {
                "print_frequency_ms": {"default": 50},
                "print_step": {"default": 2},
                "print_strategy": "fast",
            },
        },
        "body": {"elements": [{"tag": "markdown", "content": text, "element_id": ELEMENT_ID}]},
    }


def preview(text: str) -> str:
    """A closed card's summary in the chat list: the start of its text on one line."""
    return " ".join(text.split())[:60] or " "


def streaming_card(locale: str) -> dict[str, Any]:
    return build_card(PLACEHOLDER, streaming=True, locale=locale)


class CardStream:
    """Create a streaming card, reply with it, push snapshots (coalesced, throttled), then close it.

    `push()` never waits: a writer task sends the newest snapshot at most once per `interval_s`. `finish()`
    sets the final text and switches streaming off in one full card update, whatever happened before (with
    the older content + settings calls as its fallback); `broken` tells the caller the card could not show
    the final text, so a normal reply is needed.
    """

    def __init__(
        self,
        api: FeishuApi,
        reply_to: str,
        key: str,
        *,
        interval_s: float,
        locale: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._locale = locale
        self._reply_to = reply_to
        self._key = key
        self._interval_s = interval_s
        self._clock = clock
        self.card_id = ""
        self.sequence = 0
        self.broken = False
        self.first_update_at: float | None = None
        self._pending = ""
        self._sent = PLACEHOLDER
        self._wake = asyncio.Event()
        self._closing = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """Create the card entity and send it as a reply; raises `FeishuApiError` (then nothing was sent)."""
        self.card_id = await self._api.create_card(streaming_card(self._locale))
        content = {"type": "card", "data": {"card_id": self.card_id}}
        await self._api.reply(self._reply_to, "interactive", content, idempotency_key(self._key, "card"))
        self._writer = asyncio.create_task(self._write_loop(), name=f"feishu-card-{self.card_id}")

    def push(self, text: str) -> None:
        self._pending = text
        self._wake.set()

    async def finish(self, final_text: str) -> None:
        """Show `final_text` and close streaming mode; bounded in time, never raises except on cancellation.

        One full card update does both. Should it fail, the final text goes as a content update and the
        close as a settings call; `broken` is set when the card is left without the final text."""
        self._closing.set()
        self._wake.set()
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._writer), CLOSE_TIMEOUT_S)
            if not self._writer.done():
                self._writer.cancel()
        if await self._bounded("feishu_card_full_update_failed", self._update_full(final_text)):
            self.broken = False  # whatever failed before, the card now shows the final text
            return
        final_put = not self.broken and final_text != self._sent
        if final_put and not await self._bounded("feishu_card_update_failed", self._put(final_text or PLACEHOLDER)):
            self.broken = True  # the caller replies normally; the card is still closed
        if not await self._bounded("feishu_card_close_failed", self._close(final_text)):
            self.broken = self.broken or final_text != self._sent

    async def _bounded(self, event: str, call: Awaitable[None]) -> bool:
        """Await one closing call within `CLOSE_TIMEOUT_S`; False (logged) if it failed or timed out."""
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await call
        except (FeishuApiError, TimeoutError) as e:
            log.warning(event, card_id=self.card_id, sequence=self.sequence, error=str(e))
            return False
        return True

    async def _write_loop(self) -> None:
        while not self._closing.is_set():
            await self._wake.wait()
            self._wake.clear()
            if self._closing.is_set():
                return
            text = self._pending
            if text and text != self._sent and not self.broken:
                try:
                    await self._put(text, superseded=self._closing)
                except FeishuApiError as e:
                    self.broken = True
                    log.warning("feishu_card_update_failed", card_id=self.card_id, error=str(e))
                    return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), self._interval_s)

    async def _put(self, text: str, *, superseded: asyncio.Event | None = None) -> None:
        """Send `text`. A snapshot (`superseded` given) is skipped if that is set while it waits for the
        app-wide pace (its sequence number then stays unused, which CardKit allows); only a card's first
        snapshot goes ahead of everything else, as a card still showing nothing matters most."""
        self.sequence += 1
        seq = self.sequence
        uuid = idempotency_key(self._key, "content", str(seq))
        pace: Pace = "first" if self.first_update_at is None else ("urgent" if superseded is None else "normal")
        sent = await self._api.card_content(self.card_id, ELEMENT_ID, text, seq, uuid, pace=pace, superseded=superseded)
        if not sent:
            return
        self._sent = text
        if self.first_update_at is None:
            self.first_update_at = self._clock()

    async def _update_full(self, final_text: str) -> None:
        """Replace the whole card with its closed form showing `final_text`: one call, one sequence."""
        self.sequence += 1
        card = build_card(final_text or PLACEHOLDER, streaming=False, locale=self._locale)
        uuid = idempotency_key(self._key, "update", str(self.sequence))
        await self._api.card_update(self.card_id, card, self.sequence, uuid)
        self._sent = final_text
        if self.first_update_at is None:
            self.first_update_at = self._clock()

    async def _close(self, final_text: str) -> None:
        self.sequence += 1
        settings = {"config": {"streaming_mode": False, "summary": {"content": preview(final_text)}}}
        await self._api.card_settings(
            self.card_id, settings, self.sequence, idempotency_key(self._key, "close", str(self.sequence))
        )
