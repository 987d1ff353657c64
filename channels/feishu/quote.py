"""The message a Feishu message replies to (`parent_id`), fetched and put above the user's text as a quote."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from agenthub import jsonsafe
from channels.feishu.api import FeishuApi, FeishuApiError
from channels.feishu.inbound import SUPPORTED_TYPES, FeishuMessage, Mention, render_text

log = structlog.get_logger(__name__)

QUOTE_MAX_CHARS = 500
"""The quoted text is cut to this many characters: it is context, not the question."""
_CARD_TEXT_TAGS = frozenset({"markdown", "lark_md", "plain_text"})


async def with_quote(api: FeishuApi, msg: FeishuMessage, content: str, *, bot_open_id: str, timeout_s: float) -> str:
    """`content` with the replied-to message quoted above it; unchanged when `msg` replies to nothing, is a
    slash command, or the parent cannot be fetched within `timeout_s` (logged as `feishu_quote_unavailable`)."""
    if not msg.parent_id or content.startswith("/"):
        return content
    own_answer = api.answers.text_of(msg.parent_id)
    if own_answer is not None:  # the bot's own card: Feishu would return it without its streamed text
        return _above(render_quote_text(own_answer, "bot"), content)
    try:
        async with asyncio.timeout(timeout_s):
            item = await api.get_message(msg.parent_id)
    except (FeishuApiError, TimeoutError) as e:
        error = str(e) or type(e).__name__
        log.warning("feishu_quote_unavailable", message_id=msg.message_id, parent_id=msg.parent_id, error=error)
        return content
    return _above(render_quote(item, bot_open_id=bot_open_id, app_id=api.app_id), content)


def _above(quote: str, content: str) -> str:
    """`quote` above `content`, a blank line between; either alone when the other is empty (a picture's text)."""
    return "\n\n".join(part for part in (quote, content) if part)


def render_quote(item: dict[str, Any], *, bot_open_id: str, app_id: str) -> str:
    """`> 引用 <sender>: <text>` (every line quoted, at most `QUOTE_MAX_CHARS` of text) for one message item
    of `GET /open-apis/im/v1/messages/:message_id`; "" when it holds no text."""
    return render_quote_text(quoted_text(item, bot_open_id), _sender(item, app_id))


def render_quote_text(text: str, sender: str) -> str:
    """`text` as a quote from `sender`, every line quoted, cut to `QUOTE_MAX_CHARS`; "" for no text."""
    text = text.strip()
    if not text:
        return ""
    if len(text) > QUOTE_MAX_CHARS:
        text = text[:QUOTE_MAX_CHARS].rstrip() + "…"
    lines = text.split("\n")
    first = f"> 引用 {sender}: {lines[0]}"
    return "\n".join([first, *(f"> {line}" if line else ">" for line in lines[1:])])


def quoted_text(item: dict[str, Any], bot_open_id: str) -> str:
    """The readable text of a message item: text and post as the user would see them, a card's text
    elements, and `[<msg_type>]` for anything else (an image, a file, …)."""
    msg_type = _field(item, "msg_type")
    content = _field(item.get("body"), "content")
    if msg_type in SUPPORTED_TYPES:
        parent = FeishuMessage(
            event_id="",
            message_id=_field(item, "message_id"),
            chat_id=_field(item, "chat_id"),
            chat_type="",
            message_type=msg_type,
            content=content,
            sender_open_id="",
            sender_user_id="",
            sender_union_id="",
            sender_type="",
            create_time_ms=0,
            mentions=_mentions(item),
        )
        return render_text(parent, bot_open_id)
    if msg_type == "interactive":
        try:
            card = jsonsafe.loads(content) if content else {}
        except ValueError:
            card = {}
        text = "\n".join(t for t in _card_texts(card) if t.strip()).strip()
        return text or "[卡片 card]"
    return f"[{msg_type or 'message'}]"


def _mentions(item: dict[str, Any]) -> tuple[Mention, ...]:
    """The item's mentions; unlike the receive event, `id` is the id string itself here."""
    raw = item.get("mentions")
    found = [m for m in raw if isinstance(m, dict)] if isinstance(raw, list) else []
    return tuple(Mention(_field(m, "key"), _field(m, "id"), _field(m, "name")) for m in found)


def _card_texts(node: Any) -> list[str]:
    """The text of a card's markdown and plain-text elements, in order, wherever they sit in its JSON."""
    if isinstance(node, list):
        return [text for child in node for text in _card_texts(child)]
    if not isinstance(node, dict):
        return []
    if node.get("tag") in _CARD_TEXT_TAGS and isinstance(node.get("content"), str):
        return [node["content"]]
    return [text for child in node.values() for text in _card_texts(child)]


def _sender(item: dict[str, Any], app_id: str) -> str:
    sender = item.get("sender")
    sender_id = _field(sender, "id")
    if _field(sender, "sender_type") == "app":
        return "bot" if sender_id == app_id else "app"
    return sender_id or "user"


def _field(obj: Any, key: str) -> str:
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, str) else ""
