"""Conversations into the product's own store: one session per conversation, each turn a user record with its
speaker as sender id and its own timestamp."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agenthub.session.history import SessionHistory
from agenthub.session_keys import SessionKey
from recall_data.model import Conversation, Turn

AGENT = "default"
CHANNEL = "wecom"  # a two-person chat of a chat-scoped channel: a search sees only its own session


def key_of(conv: Conversation, agent: str = AGENT) -> SessionKey:
    return SessionKey(agent, CHANNEL, conv.cid)


def record(turn: Turn) -> dict[str, Any]:
    """The history record a gateway stores for a member's message in a group chat."""
    return {
        "role": "user",
        "content": turn.text,
        "timestamp": turn.timestamp,
        "channel": CHANNEL,
        "chat_type": "group",
        "sender_id": turn.speaker,
    }


async def write(history: SessionHistory, key: SessionKey, turns: Sequence[Turn], *, batch: int = 50) -> None:
    """Append `turns` to `key`'s history, `batch` at a time (as a busy chat's appends land)."""
    for start in range(0, len(turns), batch):
        await history.append(key, *(record(t) for t in turns[start : start + batch]))


async def write_all(history: SessionHistory, conversations: Sequence[Conversation]) -> None:
    for conv in conversations:
        await write(history, key_of(conv), conv.turns)
