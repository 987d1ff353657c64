"""Memory additions as notes: what keeps a write to MEMORY.md from re-writing a whole conversation's prompt cache.

The system prompt comes before the messages in the vendor's cache, so a changed memory block would make every
cached message after it a cache write again. While a chat's cache is warm, its system prompt keeps the memory text
it was cached with; text since *appended* to MEMORY.md (the write_memory tool's default) rides as a note on the
newest user message of the turn that first sees it, and on that same message in every later request, so each
request stays a prefix of the next. Anything else (a rewrite, a removal: L3, a forget), a cold cache, or a
rewritten history shows the file as it is in the system prompt again: nothing removed from memory is ever shown.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from agenthub.jsonsafe import utf8_replacing

NOTE_HEADER = "# Long-term memory (MEMORY.md): added since this conversation's system prompt"
CHATS = 1024
"""Chats whose pinned memory text is kept (least recently built dropped first: its next build shows the file)."""

Message = dict[str, Any]


def _digest(message: Message) -> bytes:
    return hashlib.blake2b(utf8_replacing(json.dumps(message, ensure_ascii=False)), digest_size=8).digest()


@dataclass
class _Pin:
    shown: str
    """The memory block the chat's system prompt carries."""
    covered: str
    """`shown` plus every addition noted since: the memory block the file makes now, when nothing changed."""
    notes: list[tuple[int, bytes, str]] = field(default_factory=list)
    """(index of the message it rides on, that message's digest without it, note text)."""


class MemoryNotes:
    """Per chat (any hashable key), the memory block its system prompt keeps and the notes that carry additions."""

    def __init__(self, chats: int = CHATS) -> None:
        self.chats = chats
        self._pins: OrderedDict[object, _Pin] = OrderedDict()

    def drop(self, key: object) -> None:
        """Forget the chat's pin (its history was rewritten): its next build shows the file as it is."""
        self._pins.pop(key, None)

    def clear(self) -> None:
        """Forget every pin (a forget changed memory files): each chat's next build shows its file as it is."""
        self._pins.clear()

    def apply(self, key: object, memory: str, messages: list[Message], warm: bool) -> tuple[str, list[Message]]:
        """The memory block for the system prompt and `messages` with the notes placed; `memory` is the block the
        file makes now ("" for none), `warm` whether the chat's cache is still alive."""
        pin = self._pins.pop(key, None)
        if pin is not None and warm:
            pin = self._extend(pin, memory, messages)
        if pin is None or not warm:
            pin = _Pin(memory, memory)
        self._pins[key] = pin
        while len(self._pins) > self.chats:
            self._pins.popitem(last=False)
        return pin.shown, self._place(pin, messages)

    def _extend(self, pin: _Pin, memory: str, messages: list[Message]) -> _Pin | None:
        """`pin` with this build's addition noted; None when it cannot hold (not an addition, a moved message)."""
        if any(i >= len(messages) or _digest(messages[i]) != digest for i, digest, _ in pin.notes):
            return None
        if memory == pin.covered:
            return pin
        newest = len(messages) - 1
        if not memory.startswith(pin.covered) or newest < 0 or messages[newest].get("role") != "user":
            return None
        if pin.notes and pin.notes[-1][0] == newest:  # two additions before one request: one note says both
            return None
        added = memory[len(pin.covered) :].strip("\n")
        text = f"{NOTE_HEADER}\n\n{added}" if pin.covered else memory  # the first memory: the block itself
        pin.notes.append((newest, _digest(messages[newest]), text))
        pin.covered = memory
        return pin

    @staticmethod
    def _place(pin: _Pin, messages: list[Message]) -> list[Message]:
        if not pin.notes:
            return messages
        placed = list(messages)
        for i, _, text in pin.notes:
            content = placed[i]["content"]
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
            placed[i] = {**placed[i], "content": [*blocks, {"type": "text", "text": text}]}
        return placed
