"""The meta rules of a history change: the meta after an append, and the part of it that is written at once."""

from __future__ import annotations

from typing import Any

from agenthub.session_keys import SessionKey
from agenthub.storage.meta import DEFAULT_TITLE, SessionMeta, synthesise_meta, text_of, title_from
from agenthub.storage.store import HistoryRecord as Message

DERIVED_FIELDS = ("updated_at", "last_usage")
"""The meta's fields that follow the history and are written behind."""


def touched_meta(
    key: SessionKey, meta: SessionMeta | None, cached: list[Message], new: list[Message], now: int
) -> SessionMeta:
    """The meta after an append: created (or synthesised for a legacy session) when missing, `updated_at` moved,
    titled by the first user message while it has the default title."""
    if meta is None:
        meta = synthesise_meta(key.chat_id, [*cached, *new], now)
    changes: dict[str, Any] = {"updated_at": now}
    if meta.title == DEFAULT_TITLE:
        first_user = next((text_of(m["content"]) for m in new if m.get("role") == "user"), "")
        if first_user.strip():
            changes["title"] = title_from(first_user)
    return meta.with_changes(**changes)


def meta_identity(meta: SessionMeta) -> SessionMeta:
    """The meta without the fields that are written behind: when it changes, the meta is written at once."""
    return meta.with_changes(updated_at=0, last_usage=None)
