"""The shapes of the recall benchmark's data: conversations of numbered turns, and questions answered by turns."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Lang = Literal["zh", "en"]
QuestionKind = Literal["single", "restated", "changed", "when", "did", "other", "multi", "after", "pref", "para"]
"""when, did, other: the long set's (`long_kinds.LongKind`); multi, after, pref, para: the casual set's
(`casual_kinds.CasualKind`)."""
T0_MS = 1_780_000_000_000
"""2026-05-28: every chat starts within ten days of it and runs for a few weeks, in sittings of a few dozen turns a
minute or two apart, a few hours to three days between sittings. A turn's millisecond part is its chat's number,
so no two turns of the data set share a timestamp."""
CONVERSATION_TURNS = 1000
"""Turn ids of conversation `n` run from `n * CONVERSATION_TURNS`: every turn of the data set has its own id."""


@dataclass(frozen=True)
class Turn:
    gid: int  # unique over the whole data set
    speaker: str  # also the sender id it is stored with
    text: str
    timestamp: int  # ms since the epoch, unique over the data set


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
    values: dict[str, str] = field(default_factory=dict)  # the fact's slots as the answer states them; `was`: the
    # older value of a changed fact


@dataclass
class Conversation:
    cid: str
    lang: Lang
    speakers: tuple[str, str]
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    _by_time: dict[int, int] = field(default_factory=dict, repr=False)

    def turn_at(self, timestamp: int | None) -> int | None:
        """The id of the turn stored at `timestamp`, None for anything else (a summary, a memory file line)."""
        if not self._by_time or len(self._by_time) != len(self.turns):
            self._by_time = {t.timestamp: t.gid for t in self.turns}
        return None if timestamp is None else self._by_time.get(timestamp)


def as_json(conversations: list[Conversation]) -> list[dict[str, Any]]:
    """The data set as plain JSON (chats with their turns and questions)."""
    return [
        {
            "id": c.cid,
            "lang": c.lang,
            "speakers": list(c.speakers),
            "turns": [asdict(t) for t in c.turns],
            "questions": [asdict(q) for q in c.questions],
        }
        for c in conversations
    ]
