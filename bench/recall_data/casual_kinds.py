"""The casual set's hand-written material: what a person says in which session (`S`), and the questions asked of the
whole chat afterwards (`Q`), each answered by one or more of those turns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

CasualKind = Literal["single", "multi", "when", "after", "pref", "changed", "para"]
"""single: one stated fact; multi: needs two turns of different sessions (both must show); when: when did X happen
(the turn's date must show beside it); after: what happened in a later session than the event the question names;
pref: a like or habit; changed: a value replaced later (the newer turn answers); para: asked in words the turn does
not use."""


@dataclass(frozen=True)
class S:
    session: int
    who: int  # 0 or 1: which speaker says it
    text: str  # `{other}`: the other speaker's name
    tag: str


@dataclass(frozen=True)
class Q:
    ask: str
    kind: CasualKind
    evidence: tuple[tuple[str, str], ...]  # (tag, the part of that turn that must show)
    stale: tuple[str, ...] = ()  # changed: the tags of the older value


Chat = tuple[tuple[str, str], list[S], list[Q]]
