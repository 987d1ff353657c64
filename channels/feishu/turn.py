"""Delivering one turn's reply: streaming cards, or a normal reply when cards are unavailable."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import structlog

from agenthub import i18n
from agenthub.gateway.handle import ReplyHandle
from agenthub.messages import DeltaEvent, DoneEvent, ErrorEvent, NoticeEvent
from channels.feishu.api import FeishuApi, FeishuApiError
from channels.feishu.card import idempotency_key
from channels.feishu.chain import CardChain
from channels.feishu.config import FeishuAppConfig
from channels.feishu.format import build_content, plain_chunks, plan_reply
from channels.toolkit.names import NameDirectory
from channels.toolkit.notices import with_notices

log = structlog.get_logger(__name__)


@dataclass
class FeishuApp:
    """One configured app at run time."""

    cred_id: str
    config: FeishuAppConfig
    api: FeishuApi | None = None
    dispatcher: Any = None
    bot_open_id: str = ""
    status: Literal["new", "ready", "failed"] = "new"
    cards_enabled: bool = True
    locale: i18n.Locale = "zh-CN"
    """`[channels.feishu] locale` (default zh-CN): the texts the channel writes itself use it."""
    names: NameDirectory | None = None
    """Users' display names through contact v3 (None: `sender_names = false`)."""

    def __post_init__(self) -> None:
        self.cards_enabled = self.config.streaming_card


async def run_turn(app: FeishuApp, reply_to: str, handle: ReplyHandle, key: str) -> None:
    """Stream `handle` into cards replying to `reply_to` (one, unless the answer outgrows it); close them
    whatever happens, and reply normally with what no card could show. Notices stay above the answer."""
    assert app.api is not None
    chain = await _open_chain(app, reply_to, key)
    text, notices = "", []
    answer: str | None = None
    try:
        async for event in handle:
            if isinstance(event, DeltaEvent):
                text += event.text
            elif isinstance(event, NoticeEvent):
                notices.append(event.text)
            elif isinstance(event, DoneEvent):
                answer = event.full_text
            elif isinstance(event, ErrorEvent):
                answer = with_error(text, event.message)
            if chain is not None and answer is None:
                await chain.push(text, notices)
    finally:
        if answer is None:
            answer = with_error(text, i18n.text("channel.interrupted", app.locale))
        unshown = with_notices(answer, notices) if chain is None else await chain.finish(answer, notices)
        app.api.answers.answered(reply_to, answer)
    if unshown is not None:
        await send_reply(app.api, reply_to, unshown, key)


async def _open_chain(app: FeishuApp, reply_to: str, key: str) -> CardChain | None:
    """The turn's first card, or None for a normal reply. Only a missing permission turns cards off for the
    app; any other failure (CardKit's 230099, a timeout) costs this turn its card, and the next one tries."""
    if not app.cards_enabled or app.api is None:
        return None
    chain = CardChain(app.api, reply_to, key, interval_s=app.config.card_update_interval_s, locale=app.locale)
    try:
        await chain.open()
    except FeishuApiError as e:
        if e.permission_denied:
            app.cards_enabled = False
            log.warning("feishu_cardkit_disabled", cred_id=app.cred_id, code=e.code, reason="permission")
        else:
            log.warning("feishu_card_open_failed", cred_id=app.cred_id, code=e.code, error=str(e))
        return None
    return chain


def with_error(text: str, message: str) -> str:
    return f"{text}\n\n> ⚠️ {message}" if text.strip() else f"⚠️ {message}"


async def send_reply(api: FeishuApi, reply_to: str, text: str, key: str) -> None:
    """Reply with `text` as text, `post` or markdown cards by content, split as needed; a refused rich part
    is resent as plain text. Raises `FeishuApiError` when even plain text fails."""
    for index, (fmt, chunk) in enumerate(plan_reply(text or " ")):
        msg_type, content = build_content(fmt, chunk)
        uuid = idempotency_key(key, "part", str(index))
        try:
            await api.reply(reply_to, msg_type, content, uuid)
            continue
        except FeishuApiError as e:
            if fmt == "text":
                raise
            log.warning("feishu_rich_reply_failed", msg_type=msg_type, code=e.code)
        for sub, (plain_type, plain) in enumerate(plain_chunks(chunk)):
            await api.reply(reply_to, plain_type, plain, idempotency_key(key, "plain", str(index), str(sub)))


async def send_safely(api: FeishuApi, reply_to: str, text: str, key: str) -> None:
    """`send_reply` for background paths: failures are logged, cancellation propagates."""
    try:
        await send_reply(api, reply_to, text, key)
    except FeishuApiError as e:
        log.error("feishu_reply_failed", code=e.code, error=str(e))
