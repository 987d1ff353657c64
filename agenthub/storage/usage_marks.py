"""Forget marks: what a forget leaves so that a usage row made before it, written after it, does not name them."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from agenthub.errors import StorageError
from agenthub.storage.atomic import atomic_write_text
from agenthub.storage.storable import storable

if TYPE_CHECKING:
    from agenthub.storage.usage import Forgotten, UsageRow

log = structlog.get_logger(__name__)

MARKS_FILE = "forgotten.json"
"""Under `data/usage/`: the files backend's forget marks (a list of `ForgetMark` fields), kept for good."""


@functools.lru_cache(maxsize=4096)  # asked on every budget check of the files backend
def forgotten_tag(channel: str, sender_id: str) -> str:
    """What a forget writes for a sender's id (`forget.redact.Person.tag`), and for a direct chat named by them:
    their usage rows keep counting against their own budget and that chat's (`usage_reserve_claims` of migration 16
    computes the same)."""
    digest = hashlib.sha256(f"{channel}\n{sender_id}".encode()).hexdigest()[:16]
    return f"forgotten-{digest}"


@dataclass(frozen=True, slots=True)
class ForgetMark:
    """A forget of the person whose tag is `tag` on `channel` (in `agents`; only in `chat` when given, a direct
    chat named by its tag), at `at` (epoch seconds). It names nobody: only the tag, never the id."""

    channel: str
    tag: str
    agents: tuple[str, ...]
    chat: str | None
    at: float

    @classmethod
    def of(cls, who: Forgotten, at: float) -> ForgetMark:
        chat = who.tag if who.chat_id == who.sender_id else who.chat_id
        return cls(who.channel, who.tag, who.agents, chat, at)

    def covers(self, row: UsageRow) -> bool:
        """The row was made (`at`) no later than the forget and is one the forget redacted, had it been stored."""
        return (
            row.at <= self.at
            and row.channel == self.channel
            and row.agent in self.agents
            and forgotten_tag(row.channel, row.sender_id) == self.tag
            and (self.chat is None or self.chat == _chat_as_redacted(row, self.tag))
        )


def _chat_as_redacted(row: UsageRow, tag: str) -> str:
    return tag if row.chat_id == row.sender_id else row.chat_id


def who_of(rows: Iterable[UsageRow]) -> list[tuple[str, str]]:
    """The (channel, tag) of the rows' senders, each once, in order: whose marks a write asks for."""
    return sorted({(r.channel, forgotten_tag(r.channel, r.sender_id)) for r in rows if r.sender_id})


def unnamed(rows: Sequence[UsageRow], marks: Collection[ForgetMark]) -> Sequence[UsageRow]:
    """The rows, those a mark covers naming the tag instead of the person (their tokens stay)."""
    if not marks:
        return rows
    out = []
    for row in rows:
        out.append(under_tag(row) if any(m.covers(row) for m in marks) else row)
    return out


def under_tag(row: UsageRow) -> UsageRow:
    """The row naming its sender's tag instead of them (and instead of a direct chat named by them)."""
    tag = forgotten_tag(row.channel, row.sender_id)
    return dataclasses.replace(row, sender_id=tag, chat_id=_chat_as_redacted(row, tag))


def names_told_after(
    names: Mapping[tuple[str, str], str], told: Mapping[tuple[str, str], float], marks: Collection[ForgetMark]
) -> dict[tuple[str, str], str]:
    """The names not told before a forget of their sender (a name with no time is kept), each `storable` (a
    channel's directory may give one holding NUL, which PostgreSQL refuses: every later flush of usage failed)."""
    last: dict[tuple[str, str], float] = {}
    for m in marks:
        last[(m.channel, m.tag)] = max(m.at, last.get((m.channel, m.tag), m.at))
    return {
        who: storable(name)
        for who, name in names.items()
        if who not in told or told[who] > last.get((who[0], forgotten_tag(*who)), float("-inf"))
    }


def read_marks(path: Path) -> list[ForgetMark]:
    """The marks `write_marks` wrote (none yet, or unreadable: none, the latter logged)."""
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
        return [ForgetMark(m[0], m[1], tuple(m[2]), m[3], float(m[4])) for m in found]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, TypeError, IndexError) as e:
        log.warning("usage_forget_marks_unreadable", error=type(e).__name__)
        return []


def write_marks(path: Path, marks: Sequence[ForgetMark]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps([[m.channel, m.tag, list(m.agents), m.chat, m.at] for m in marks]))
    except OSError as e:
        raise StorageError("could not write the usage forget marks") from e
