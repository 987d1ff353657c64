"""The long set's hand-written facts: a fact turn (or an old value and its change), where it sits, and the question
that asks it with the part of the turn that answers it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

LongKind = Literal["single", "when", "did", "changed", "other"]
"""single: a fact a person states; when: when did X do Y (the answer's date must show); did: what did X do;
changed: a value stated, then changed in a later session (the newer answers); other: a fact a person says about the
other one."""


@dataclass(frozen=True)
class F:
    session: int  # which dated session of the chat holds the fact turn
    who: int  # speaker index of the fact turn (0 or 1)
    text: str  # the fact turn; `{other}` is the other speaker's name
    ask: str  # the question, as a person asks it
    needle: str  # the distinctive part of `text` that answers it
    kind: LongKind = "single"
    lead: str = ""  # a turn of the other speaker just before it (a question that leads to it)
    old: tuple[int, str] = (-1, "")  # changed: (session, turn) of the older value, same speaker
