"""A session's history converted up to its last settled turn, kept between builds: a turn converts only what was
appended since, and the result is the list `to_conversation` makes of the whole history."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable
from typing import Any

Message = dict[str, Any]
Convert = Callable[[list[Message]], list[Message]]
Kept = Callable[[list[Message]], list[Message]]
Predicate = Callable[[Message], bool]


class SettledPrefix:
    """`history[:c]` (the objects, held) and its conversion. A cut at `c` is settled when `history[c - 1]` is a
    plain assistant answer (no refusal, not empty, no tool blocks) and `history[c]` a user message with a block
    other than tool blocks (always sent): while both are sent, nothing after the cut changes how what comes before
    it converts (no merge, no tool pairing across it). Only a refused turn after the cut can take `history[c]` (or
    more) away: `convert_tail` checks that it did not."""

    __slots__ = ("chat_type", "conversation", "items", "marks", "returned", "system_texts")

    def __init__(self) -> None:
        self.items: list[Message] = []
        self.conversation: list[Message] = []
        self.system_texts: list[str] = []
        self.chat_type: object = None
        """`chat_type_of(items)`: what the newest user message of the prefix was stored with."""
        self.marks: dict[Predicate, list[int]] = {}
        """Per predicate asked about (`positions`), the indices of `conversation`'s messages it holds for."""
        self.returned: list[Message] | None = None
        """The conversation `settled_conversation` last returned as `conversation` and a tail (None: another)."""

    def reset(self) -> None:
        self.items, self.conversation, self.system_texts, self.chat_type = [], [], [], None
        self.marks, self.returned = {}, None

    def extend(self, extension: list[Message]) -> None:
        """`conversation` grown by `extension`: each predicate's marks tested on the new messages alone."""
        start = len(self.conversation)
        self.conversation = self.conversation + extension
        for predicate, marks in self.marks.items():
            marks.extend(_where(predicate, extension, start))

    def positions(self, predicate: Predicate, conversation: list[Message]) -> list[int]:
        """The indices of `conversation`'s messages `predicate` holds for (a pure function of a message, which is
        never changed in place). For the conversation `settled_conversation` last returned, the prefix's part is
        kept from build to build, each message tested once; the tail is tested now. Any other: all are tested."""
        if conversation is not self.returned:
            return _where(predicate, conversation)
        start = len(self.conversation)
        marks = self.marks.get(predicate)
        if marks is None:
            marks = self.marks[predicate] = _where(predicate, self.conversation)
        return [*marks, *_where(predicate, conversation[start:], start)]

    def chat_type_of(self, history: list[Message]) -> object:
        """`chat_type_of(history)` from the messages after the prefix alone (`history` starts with the prefix:
        `settled_conversation` made it so for this history)."""
        return chat_type_of(history[len(self.items) :], self.chat_type)

    def holds_prefix_of(self, history: list[Message]) -> bool:
        """Whether `history` starts with the very messages converted (a replace or redaction makes new objects)."""
        n = len(self.items)
        return n < len(history) and all(map(operator.is_, history[:n], self.items))


def _where(predicate: Predicate, messages: list[Message], start: int = 0) -> list[int]:
    return list(itertools.compress(itertools.count(start), map(predicate, messages)))  # at C speed


TOOL_BLOCKS = ("tool_use", "tool_result")


def chat_type_of(history: list[Message], default: object = None) -> object:
    """The `chat_type` the newest user message of `history` was stored with (`default` when none was)."""
    for message in reversed(history):
        if message.get("role") == "user" and "chat_type" in message:
            return message["chat_type"]
    return default


def settles(before: Message, message: Message) -> bool:
    """Whether the history may be cut between `before` and `message` (see `SettledPrefix`)."""
    if message.get("role") != "user" or before.get("role") != "assistant" or before.get("refusal"):
        return False
    opening = message.get("content")
    if not isinstance(opening, str) and not (
        isinstance(opening, list) and any(isinstance(b, dict) and b.get("type") not in TOOL_BLOCKS for b in opening)
    ):
        return False
    content = before.get("content")
    if isinstance(content, str):
        return bool(content.strip())
    return (
        isinstance(content, list)
        and bool(content)
        and not any(isinstance(b, dict) and b.get("type") in TOOL_BLOCKS for b in content)
    )


def last_cut(history: list[Message], after: int) -> int:
    """The last settled cut beyond `after` (0: none); only the messages after it are looked at."""
    for c in range(len(history) - 1, max(after, 0), -1):
        if settles(history[c - 1], history[c]):
            return c
    return 0


def convert_tail(history: list[Message], cut: int, end: int, convert: Convert, kept: Kept) -> list[Message] | None:
    """`convert(history[:end])[len(convert(history[:cut])):]` from `history[cut - 1 : end]` alone, or None when a
    refusal in it takes away a message on either side of the cut (`kept`: the history without its refused turns)."""
    part = history[cut - 1 : end]
    survivors = kept(part)
    if len(survivors) < 2 or survivors[0] is not part[0] or survivors[1] is not part[1]:
        return None
    converted = convert(part)  # [placeholder for the earlier part, the answer before the cut, …]
    if len(converted) < 2 or converted[1].get("role") != "assistant":
        return None
    return converted[2:]


def system_texts(history: list[Message], start: int = 0) -> list[str]:
    """The text of `role: "system"` messages (summaries) from `start` on, in order."""
    return [
        str(m["content"]) for m in history[start:] if m.get("role") == "system" and isinstance(m.get("content"), str)
    ]


def settled_conversation(
    prefix: SettledPrefix, history: list[Message], convert: Convert, kept: Kept, whole: Convert | None = None
) -> tuple[list[Message], list[str], int]:
    """(`convert(history)`, the system texts of `history`, how many messages were converted), converting only what
    follows the kept prefix when `history` still starts with it; the prefix moves to the last settled cut. With no
    cut to keep (or a refusal across it), `whole` (default `convert`) converts the whole history, its count not
    included (a memoised conversion counts its own)."""
    if prefix.items and not prefix.holds_prefix_of(history):
        prefix.reset()
    start = len(prefix.items)
    cut = last_cut(history, start)
    converted = 0
    if cut:
        extension = convert_tail(history, start, cut, convert, kept) if start else None
        if extension is None:
            prefix.conversation, prefix.system_texts = convert(history[:cut]), system_texts(history[:cut])
            prefix.chat_type, prefix.marks = chat_type_of(history[:cut]), {}
            converted += cut
        else:
            prefix.extend(extension)
            prefix.system_texts = prefix.system_texts + system_texts(history[start:cut])
            prefix.chat_type = chat_type_of(history[start:cut], prefix.chat_type)
            converted += cut - start + 1
        prefix.items = history[:cut]
    start = len(prefix.items)
    tail = convert_tail(history, start, len(history), convert, kept) if start else None
    if tail is None:
        prefix.returned = None
        return (whole or convert)(history), system_texts(history), converted + (0 if whole else len(history))
    conversation = prefix.returned = prefix.conversation + tail
    return conversation, prefix.system_texts + system_texts(history, start), converted + len(tail) + 1
