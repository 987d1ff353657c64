"""Session meta (`<file>.meta.json`): title, timestamps, pin, and the last real usage for the context meter."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog

from agenthub import jsonsafe
from agenthub.storage.atomic import atomic_write_text
from agenthub.storage.json_text import json_text

log = structlog.get_logger(__name__)

DEFAULT_TITLE = "新会话"
TITLE_CHARS = 40
METADATA_KEYS = ("channel", "from", "sender", "chat", "time", "via")
_PREFIXES = re.compile(r"^\s*(?:\[(?:" + "|".join(METADATA_KEYS) + r"): [^\]\n]{0,60}\]\s*)+")
"""Only the `[key: value]` metadata the product puts before a message (`[channel: x]`, `[from: y]`);
a bracket the user typed (`[重要] …`) is part of the title."""
_SPACES = re.compile(r"\s+")


def text_of(content: Any) -> str:
    """The plain text of a history message's content (a string or Anthropic content blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def title_from(text: str) -> str:
    """The first 40 characters of a user message, the product's `[key: value]` metadata
    prefixes (`[channel: x]`) stripped."""
    cleaned = _SPACES.sub(" ", _PREFIXES.sub("", text)).strip()
    return cleaned[:TITLE_CHARS] or DEFAULT_TITLE


@dataclass(frozen=True)
class SessionMeta:
    """What the session list shows; `last_usage` is the newest turn's real token usage."""

    chat_id: str
    title: str = DEFAULT_TITLE
    created_at: int = 0
    updated_at: int = 0
    pinned: bool = False
    last_usage: dict[str, int] | None = field(default=None)

    def to_json(self) -> dict[str, Any]:
        """Its fields as a JSON object (`last_usage` copied, left out when None); built by hand: `asdict` copies
        each field deeply, and a moved turn's let-go writes the meta."""
        data: dict[str, Any] = {
            "chat_id": self.chat_id,
            "title": self.title,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "pinned": self.pinned,
        }
        if self.last_usage is not None:
            data["last_usage"] = dict(self.last_usage)
        return data

    def with_changes(self, **changes: Any) -> SessionMeta:
        return replace(self, **changes)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SessionMeta:
        usage = data.get("last_usage")
        return cls(
            chat_id=str(data["chat_id"]),
            title=str(data.get("title") or DEFAULT_TITLE),
            created_at=int(data.get("created_at", 0)),
            updated_at=int(data.get("updated_at", 0)),
            pinned=bool(data.get("pinned", False)),
            last_usage={k: int(v) for k, v in usage.items()} if isinstance(usage, dict) else None,
        )


def synthesise_meta(chat_id: str, messages: list[dict[str, Any]], now_ms: int) -> SessionMeta:
    """Meta for a legacy session that has none: title from the first user message, times from the messages."""
    stamps = [int(m["timestamp"]) for m in messages if isinstance(m.get("timestamp"), int | float)]
    first_user = next((text_of(m.get("content")) for m in messages if m.get("role") == "user"), "")
    return SessionMeta(
        chat_id=chat_id,
        title=title_from(first_user) if first_user else DEFAULT_TITLE,
        created_at=stamps[0] if stamps else now_ms,
        updated_at=stamps[-1] if stamps else now_ms,
    )


def read_meta(path: Path) -> SessionMeta | None:
    try:
        return SessionMeta.from_json(jsonsafe.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, AttributeError):
        log.warning("meta_unreadable", path=str(path))
        return None


def write_meta(path: Path, meta: SessionMeta, *, durable: bool = True) -> None:
    atomic_write_text(path, json_text(meta.to_json()), durable=durable)
