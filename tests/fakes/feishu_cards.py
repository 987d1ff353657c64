"""The fake Feishu's CardKit card entity and its reading of a full card update body (`PUT …/cards/:card_id`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


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
