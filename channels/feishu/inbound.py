"""Pure parsing of Feishu message events: addressing, @mention gating and stripping, text extraction."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from agenthub import jsonsafe
from channels.feishu.config import SessionScope

SUPPORTED_TYPES = frozenset({"text", "post"})
MENTION_ALL_KEY = "@_all"
_SPACES = re.compile(r"[ \t]+")


@dataclass(frozen=True, slots=True)
class Mention:
    key: str
    open_id: str
    name: str


@dataclass(frozen=True, slots=True)
class FeishuMessage:
    """The fields of an `im.message.receive_v1` event AgentHub uses; plain data, nothing SDK-shaped."""

    event_id: str
    message_id: str
    chat_id: str
    chat_type: str
    message_type: str
    content: str
    sender_open_id: str
    sender_user_id: str
    sender_union_id: str
    sender_type: str
    create_time_ms: int
    root_id: str = ""
    parent_id: str = ""
    """The message this one replies to (quotes), if any."""
    thread_id: str = ""
    mentions: tuple[Mention, ...] = field(default_factory=tuple)

    @property
    def is_group(self) -> bool:
        return self.chat_type != "p2p"

    @property
    def sender_ids(self) -> set[str]:
        return {i for i in (self.sender_open_id, self.sender_user_id, self.sender_union_id) if i}


class BadEvent(ValueError):
    """The envelope lacks a field a message event must have."""


def _str(obj: Any, *keys: str) -> str:
    for key in keys:
        if not isinstance(obj, dict):
            return ""
        obj = obj.get(key)
    return obj if isinstance(obj, str) else ""


def parse_message_event(envelope: dict[str, Any]) -> FeishuMessage:
    """Read a v2 `im.message.receive_v1` envelope (`{"schema", "header", "event"}`); raise `BadEvent`."""
    event = envelope.get("event")
    if not isinstance(event, dict) or not isinstance(event.get("message"), dict):
        raise BadEvent("event.message missing")
    msg, sender = event["message"], event.get("sender") or {}
    message_id = _str(msg, "message_id")
    if not message_id or not _str(msg, "chat_id"):
        raise BadEvent("message_id or chat_id missing")
    mentions = tuple(
        Mention(_str(m, "key"), _str(m, "id", "open_id"), _str(m, "name"))
        for m in msg.get("mentions") or []
        if isinstance(m, dict)
    )
    try:
        created = int(_str(msg, "create_time") or 0)
    except ValueError:
        created = 0
    return FeishuMessage(
        event_id=_str(envelope, "header", "event_id"),
        message_id=message_id,
        chat_id=_str(msg, "chat_id"),
        chat_type=_str(msg, "chat_type") or "p2p",
        message_type=_str(msg, "message_type"),
        content=_str(msg, "content"),
        sender_open_id=_str(sender, "sender_id", "open_id"),
        sender_user_id=_str(sender, "sender_id", "user_id"),
        sender_union_id=_str(sender, "sender_id", "union_id"),
        sender_type=_str(sender, "sender_type"),
        create_time_ms=created,
        root_id=_str(msg, "root_id"),
        parent_id=_str(msg, "parent_id"),
        thread_id=_str(msg, "thread_id"),
        mentions=mentions,
    )


def message_content(message: FeishuMessage) -> dict[str, Any]:
    """The message's `content` JSON object ({} when it is not one)."""
    try:
        content = jsonsafe.loads(message.content) if message.content else {}
    except ValueError:
        return {}
    return content if isinstance(content, dict) else {}


def raw_text(message: FeishuMessage) -> str:
    """The text of a `text` or `post` message with `@_user_N` placeholders still in place ("" for other types)."""
    content = message_content(message)
    if message.message_type == "text":
        return _str(content, "text")
    return _post_text(content) if message.message_type == "post" else ""


def post_paragraphs(content: dict[str, Any]) -> tuple[str, list[list[dict[str, Any]]]]:
    """A post's title and its rows of elements, from the flat form or a locale wrapper (`{"zh_cn": {…}}`)."""
    if "content" not in content:
        content = next((v for v in content.values() if isinstance(v, dict)), {})
    rows = content.get("content")
    rows = rows if isinstance(rows, list) else []
    return _str(content, "title"), [[el for el in row if isinstance(el, dict)] for row in rows if isinstance(row, list)]


def _post_text(content: dict[str, Any]) -> str:
    title, paragraphs = post_paragraphs(content)
    lines = [title] if title else []
    lines += ["".join(_post_element(el) for el in paragraph) for paragraph in paragraphs]
    return "\n".join(lines)


def _post_element(el: dict[str, Any]) -> str:
    tag = el.get("tag")
    if tag in ("text", "md"):
        return _str(el, "text")
    if tag == "a":
        text, href = _str(el, "text"), _str(el, "href")
        return f"[{text}]({href})" if href and text != href else href or text
    if tag == "at":
        key = _str(el, "user_id")
        return key if key.startswith("@_") else f"@{_str(el, 'user_name') or key}"
    if tag == "code_block":
        return f"\n```{_str(el, 'language').lower()}\n{_str(el, 'text')}\n```\n"
    if tag == "emotion":
        return f"[{_str(el, 'emoji_type')}]"
    return ""


def mentions_bot(message: FeishuMessage, bot_open_id: str, *, mention_all: bool) -> bool:
    """Whether a group message addresses the bot: its open_id is mentioned (or @all, when enabled)."""
    if any(m.open_id == bot_open_id for m in message.mentions if bot_open_id):
        return True
    return mention_all and (
        any(m.key == MENTION_ALL_KEY for m in message.mentions) or MENTION_ALL_KEY in raw_text(message)
    )


def render_text(message: FeishuMessage, bot_open_id: str) -> str:
    """The text to submit: the bot's own mentions removed (so `@bot /restart` is `/restart`), others as names."""
    text = raw_text(message)
    for mention in sorted(message.mentions, key=lambda m: len(m.key), reverse=True):
        if not mention.key:
            continue
        replacement = "" if mention.open_id and mention.open_id == bot_open_id else f"@{mention.name}"
        text = text.replace(mention.key, replacement)
    text = text.replace(MENTION_ALL_KEY, "@all")
    lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    return "\n".join(lines).strip()


def session_chat_id(message: FeishuMessage, scope: SessionScope) -> str:
    """The `chat_id` of the session: the sender in a DM; the group, optionally per member and/or topic."""
    if not message.is_group:
        return message.sender_open_id or message.chat_id
    parts = [message.chat_id]
    topic = message.thread_id or message.root_id
    if scope in ("group_topic", "group_topic_sender") and topic:
        parts.append(topic)
    if scope in ("group_sender", "group_topic_sender") and message.sender_open_id:
        parts.append(message.sender_open_id)
    return ":".join(parts)
