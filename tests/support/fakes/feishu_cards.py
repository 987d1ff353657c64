"""The fake Feishu's CardKit card entity and its reading of a full card update body (`PUT …/cards/:card_id`)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class FakeCard:
    card_id: str
    card: dict[str, Any]
    """The card JSON as created."""
    content: str
    streaming: bool
    sequences: list[int] = field(default_factory=list)
    updates: list[tuple[float, str]] = field(default_factory=list)
    """Element content updates (`PUT …/elements/:element_id/content`): (monotonic time, text)."""
    settings: list[dict[str, Any]] = field(default_factory=list)
    full_updates: list[tuple[float, str, bool]] = field(default_factory=list)
    """Full card updates (`PUT …/cards/:card_id`): (monotonic time, markdown text, streaming_mode)."""
    full_cards: list[dict[str, Any]] = field(default_factory=list)
    """The card JSON each full update replaced the card with."""
    created_at: float = 0.0

    def first_shown_at(self) -> float | None:
        """When the card first showed text sent after its creation, by either kind of update."""
        times = [t for t, _ in self.updates[:1]] + [t for t, _, _ in self.full_updates[:1]]
        return min(times, default=None)

    def apply_full_update(self, card: dict[str, Any], at: float) -> None:
        content = markdown_content(card)
        self.full_cards.append(card)
        self.content = content
        self.streaming = bool(card.get("config", {}).get("streaming_mode", False))
        self.full_updates.append((at, content, self.streaming))


def markdown_content(card: dict[str, Any]) -> str:
    elements = card.get("body", {}).get("elements", [])
    return next((str(e.get("content", "")) for e in elements if e.get("tag") == "markdown"), "")


def parse_full_update(body: dict[str, Any]) -> dict[str, Any] | str:
    """The card JSON 2.0 inside a full update's `card.data`, or why Feishu would refuse the body."""
    card = body.get("card")
    if not isinstance(card, dict) or card.get("type") != "card_json" or not isinstance(card.get("data"), str):
        return "card must be {type: card_json, data: <JSON string>}"
    if not isinstance(body.get("sequence"), int):
        return "sequence is required"
    try:
        data = json.loads(card["data"])
    except ValueError:
        return "card.data is not JSON"
    if not isinstance(data, dict) or data.get("schema") != "2.0":
        return "card.data must be a card JSON 2.0 object"
    return data


CARD_MAX_BYTES = 30 * 1024
"""Feishu's card size limit (feishu.md §5.2), measured here on the card JSON as UTF-8."""
MESSAGE_MAX_BYTES = 150 * 1024
"""The limit of a `text` or `post` message body."""
CARD_TOO_LARGE = (230099, "Failed to create card content, ext=ErrMsg: card size exceeds the limit (30 KB);")
"""The reference names no code for an oversized card: the fake answers CardKit's generic create failure."""
CARD_TOO_MANY_TABLES = (
    230099,
    "Failed to create card content, ext=ErrCode: 11310; ErrMsg: card table number over limit; ErrorValue: table;",
)
"""One table per card: Feishu reports 11310 inside a 230099 answer."""
_DELIMITER_ROW = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")


def count_tables(markdown: str) -> int:
    """Markdown tables (a `|` header row directly above a `|---|` delimiter row), code fences excepted."""
    tables, in_fence, previous = 0, False, ""
    for line in markdown.split("\n"):
        if line.lstrip().startswith("```"):
            in_fence, previous = not in_fence, ""
            continue
        if not in_fence and "|" in previous and "|" in line and _DELIMITER_ROW.match(line):
            tables += 1
        previous = "" if in_fence else line
    return tables


def card_limit_error(card: dict[str, Any]) -> tuple[int, str] | None:
    """`(code, msg)` Feishu answers for a card over its size or table limit, else None."""
    if len(json.dumps(card, ensure_ascii=False).encode()) > CARD_MAX_BYTES:
        return CARD_TOO_LARGE
    elements = card.get("body", {}).get("elements", [])
    if sum(count_tables(str(e.get("content", ""))) for e in elements if e.get("tag") == "markdown") > 1:
        return CARD_TOO_MANY_TABLES
    return None


def message_limit_error(msg_type: str, content: str) -> tuple[int, str] | None:
    """The limits of a sent message: an inline card's, or 150 KB for text and post bodies."""
    if msg_type == "interactive":
        return card_limit_error(json.loads(content))
    if len(content.encode()) > MESSAGE_MAX_BYTES:
        return 230025, "message content exceeds the length limit"
    return None


def with_content(card: dict[str, Any], content: str) -> dict[str, Any]:
    """The card with its markdown element's text replaced, as an element content update leaves it."""
    elements = [
        {**e, "content": content} if e.get("tag") == "markdown" else e for e in card.get("body", {}).get("elements", [])
    ]
    return {**card, "body": {**card.get("body", {}), "elements": elements}}


def card_refusal(card: dict[str, Any]) -> web.Response | None:
    """Feishu's answer to a card over its limits, or None."""
    refused = card_limit_error(card)
    return None if refused is None else web.json_response({"code": refused[0], "msg": refused[1]}, status=400)
