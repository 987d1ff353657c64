"""One AI-bot reply as a real stream: throttled full-text frames, keepalives, the 20480-byte cap, `finish: true`."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import structlog

from agenthub.errors import ChannelSendError
from agenthub.gateway.handle import ReplyHandle
from agenthub.messages import DeltaEvent, DoneEvent, ErrorEvent, NoticeEvent
from channels.toolkit.notices import with_notices
from channels.wecom.aibot_conn import AckTimeout, BotApiError, BotConnection
from channels.wecom.config import BotConfig
from channels.wecom.text import split_utf8, utf8_len

log = structlog.get_logger(__name__)

STREAM_EXPIRED = 846608
ABANDON_TIMEOUT_S = 2.0  # on cancellation (daemon stop), how long the closing frame may take
NOTICE_BUDGET_DIVISOR = 4  # the notice lines above a reply take at most this share of the stream cap


class StreamReply:
    """Streams one handle's reply under one `stream.id`, echoing the callback's `req_id`.

    Every frame carries the full text so far. Updates are at least `throttle_s` apart and skipped when nothing
    changed, except that a silent stream is refreshed every `keepalive_s` (WeCom expires it after ~6 minutes).
    When the text outgrows the cap, or the stream expired anyway, the stream is finished and the rest follows
    as `aibot_send_msg` markdown messages, so nothing is cut off.

    Notices (queueing, compaction, model fallback) are shown as lines above the text in every frame from the
    moment they arrive, so a "queued" or "compacting" notice is visible while the user waits.
    """

    def __init__(self, conn: BotConnection, config: BotConfig, req_id: str, chat_id: str) -> None:
        self._conn = conn
        self._cfg = config
        self.req_id = req_id
        self.chat_id = chat_id
        self.stream_id = secrets.token_hex(8)
        self._text = ""
        self._base = 0  # where the text still to be shown starts (moves when the stream is closed early)
        self._stream_open = True
        self._sent: str | None = None  # the last frame WeCom accepted, as sent
        self._sent_text: str | None = None  # ... and the reply text in it (without the notice lines)
        self._notices: list[str] = []
        self._notices_sent = 0  # how many of `_notices` the last accepted frame showed
        self._changed = asyncio.Event()
        self._closing = asyncio.Event()

    async def run(self, handle: ReplyHandle) -> None:
        """Consume the handle and stream it; always ends the stream with `finish: true`."""
        self._changed.set()  # show the thinking placeholder at once
        writer = asyncio.create_task(self._write_loop())
        final: DoneEvent | ErrorEvent | None = None
        try:
            async for event in handle:
                if isinstance(event, DeltaEvent):
                    self._text += event.text
                    self._changed.set()
                elif isinstance(event, NoticeEvent):
                    self._add_notice(event.text)
                elif isinstance(event, DoneEvent | ErrorEvent):
                    final = event
        except BaseException as e:
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
            if isinstance(e, asyncio.CancelledError):
                await self._abandon()
            raise
        self._closing.set()
        self._changed.set()
        await writer  # lets an update in flight get its ack, so acks never cross between frames
        await self.finish(self._final_text(final))

    def _add_notice(self, text: str) -> None:
        if text in self._notices:
            return
        budget = self._cfg.stream_cap_bytes // NOTICE_BUDGET_DIVISOR
        if utf8_len(with_notices("", [*self._notices, text])) > budget:
            log.warning("wecom_bot_notice_not_shown", req_id=self.req_id, notice=text[:200], reason="too long")
            return
        self._notices.append(text)
        self._changed.set()

    def _room(self) -> int:
        """Bytes of reply text that fit in one frame below the notice lines."""
        head = with_notices("", self._notices)
        return self._cfg.stream_cap_bytes - (utf8_len(head) + 2 if head else 0)

    def _thinking(self) -> str:
        return self._cfg.thinking_text or self._cfg.text("channel.thinking")

    async def say(self, text: str) -> None:
        """A one-frame answer (refusal, unsupported type)."""
        await self.finish(text)

    def _final_text(self, final: DoneEvent | ErrorEvent | None) -> str:
        if isinstance(final, DoneEvent):
            shown = self._text[: self._base]
            return final.full_text if final.full_text.startswith(shown) else shown + final.full_text
        message = final.message if isinstance(final, ErrorEvent) else self._cfg.text("channel.interrupted")
        return f"{self._text}\n\n{message}" if self._text else message

    async def _write_loop(self) -> None:
        while not self._closing.is_set():
            keepalive = False
            try:
                async with asyncio.timeout(self._cfg.keepalive_s):
                    await self._changed.wait()
            except TimeoutError:
                keepalive = True
            if self._closing.is_set():
                return
            self._changed.clear()
            await self._push(force=keepalive)
            try:
                async with asyncio.timeout(self._cfg.throttle_s):
                    await self._closing.wait()
            except TimeoutError:
                pass

    async def _push(self, *, force: bool) -> None:
        if not self._stream_open:
            return
        text = self._text[self._base :] or self._thinking()
        room = self._room()
        if utf8_len(text) > room:
            first = split_utf8(text, room)[0]
            await self._close_stream(first, len(first))
            log.info("wecom_bot_stream_capped", req_id=self.req_id, shown_chars=self._base)
            return
        if with_notices(text, self._notices) == self._sent and not force:
            return
        await self._respond(text, finish=False)

    async def finish(self, full_text: str) -> None:
        """Close the stream with the final text; what does not fit goes out as follow-up messages."""
        if self._stream_open:
            rest = full_text[self._base :]
            first = split_utf8(rest, self._room())[0] if rest else ""
            await self._close_stream(first or self._cfg.text("channel.empty_reply"), len(first))
        unseen = self._notices[self._notices_sent :]
        if unseen:  # arrived after the stream was closed (capped or expired): never silent
            await self._push_message(with_notices("", unseen))
        rest = full_text[self._base :]
        for part in split_utf8(rest, self._cfg.stream_cap_bytes) if rest else []:
            await self._push_message(part)

    async def _close_stream(self, content: str, consumed: int) -> None:
        """Send the `finish` frame; `consumed` characters from `_base` are shown once WeCom accepts it.

        When WeCom rejects it (expired, unsupported), the text from the last accepted frame on is still owed.
        """
        if await self._respond(content, finish=True):
            self._base += consumed
        elif self._stream_open:
            self._base = self._shown_len()
        self._stream_open = False

    async def _abandon(self) -> None:
        """The reply was cancelled (daemon stopping): close the stream briefly rather than leave it spinning."""
        if not self._stream_open:
            return
        shown = self._text[self._base :]
        interrupted = self._cfg.text("channel.interrupted")
        content = split_utf8(f"{shown}\n\n{interrupted}" if shown else interrupted, self._room())[0]
        try:
            async with asyncio.timeout(min(ABANDON_TIMEOUT_S, self._cfg.ack_timeout_s)):
                await self._respond(content, finish=True)
        except TimeoutError:
            log.warning("wecom_bot_stream_abandoned", req_id=self.req_id)
        self._stream_open = False

    async def _respond(self, text: str, *, finish: bool) -> bool:
        """Send one stream frame of `text` below the notices; False when WeCom rejected it (no ack at all counts
        as sent: it may be shown). A `finish` frame without an ack is sent once more, or the bubble would spin
        until the stream expires."""
        notices = len(self._notices)
        content = with_notices(text, self._notices[:notices])
        body: dict[str, Any] = {
            "msgtype": "stream",
            "stream": {"id": self.stream_id, "finish": finish, "content": content},
        }
        try:
            await self._request_frame(body, finish=finish)
            self._sent, self._sent_text = content, text
        except BotApiError as e:
            log.warning("wecom_bot_respond_failed", req_id=self.req_id, errcode=e.errcode, error=str(e))
            if e.errcode == STREAM_EXPIRED:
                self._stream_open = False
                self._base = self._shown_len()
            return False
        except ChannelSendError as e:
            log.warning("wecom_bot_respond_failed", req_id=self.req_id, error=str(e))
        self._notices_sent = notices  # like the text: a frame without an ack may well be shown
        return True

    async def _request_frame(self, body: dict[str, Any], *, finish: bool) -> None:
        # each frame carries the full text so far, so resending it (after a reconnect, or once more when a
        # finish frame got no ack) is harmless
        try:
            await self._conn.request("aibot_respond_msg", body, req_id=self.req_id, idempotent=True)
        except AckTimeout:
            if not finish:
                raise
            log.warning("wecom_bot_finish_unacked", req_id=self.req_id, hint="sending the finish frame again")
            await self._conn.request("aibot_respond_msg", body, req_id=self.req_id, idempotent=True)

    def _shown_len(self) -> int:
        """After an expiry, what the user last saw ends at the last frame WeCom accepted."""
        if self._sent_text is None or self._sent_text == self._thinking():
            return self._base
        return self._base + len(self._sent_text)

    async def _push_message(self, content: str) -> None:
        """A follow-up message: `aibot_send_msg` under a fresh req_id of its own, as the official SDKs send it."""
        body: dict[str, Any] = {"chatid": self.chat_id, "msgtype": "markdown", "markdown": {"content": content}}
        try:
            await self._conn.request("aibot_send_msg", body)
        except ChannelSendError as e:
            log.error("wecom_bot_followup_failed", req_id=self.req_id, error=str(e))
