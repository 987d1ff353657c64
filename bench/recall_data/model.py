"""The shapes of the recall benchmark's data: conversations of numbered turns, and questions answered by turns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Lang = Literal["zh", "en"]
QuestionKind = Literal["single", "restated", "changed"]
T0_MS = 1_780_000_000_000
"""The timestamp of turn 0 (2026-05-28); turn `gid` is stored at `T0_MS + gid * TURN_MS`."""
TURN_MS = 60_000
CONVERSATION_TURNS = 1000
"""Turn ids of conversation `n` run from `n * CONVERSATION_TURNS`: every turn of the data set has its own id."""


@dataclass(frozen=True)
class Turn:
    gid: int  # unique over the whole data set
    speaker: str  # also the sender id it is stored with
    text: str

    @property
    def timestamp(self) -> int:
        return T0_MS + self.gid * TURN_MS


@dataclass(frozen=True)
class Question:
    qid: str
    conversation: str
    lang: Lang
    kind: QuestionKind
    fact: str  # the fact kind it asks about (car, door_code, ...)
    asked: str  # as a person asks it
    keywords: str  # 2-4 content words a model would pick
    answers: tuple[int, ...]  # gids of the turns that answer it (any one counts)
    stale: tuple[int, ...] = ()  # for a changed fact: the turns with the older value (must rank below)


@dataclass
class Conversation:
    cid: str
    lang: Lang
    speakers: tuple[str, str]
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)

    def position(self, gid: int) -> int:
        """The index in `turns` of the turn `gid`."""
        return gid - self.turns[0].gid
