"""Feedback from the first hits: the names, titles and codes the best passages on the asked thing hold, searched
again, so a later turn naming them without the query's words is reached ("I work at Bluefin" … "handed in my
notice at Bluefin, starting at Halcyon Health"; "we named the camper van Marmalade" … "took Marmalade to the
lakes")."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from functools import lru_cache

from agenthub.search.text import STOP_WORDS, index_terms
from agenthub.search.when import MONTHS, WEEKDAYS
from agenthub.storage.search_index import SearchHit

FEEDBACK_HITS = 2
"""The names of this many of the first search's best passages are searched again."""
FEEDBACK_TERMS = 6
"""At most this many terms widen the feedback search."""

_SENTENCES = re.compile(r"[^.!?。！？\n]+")
_NAMED = re.compile(r"(?<=[\s(\"“])[A-Z][a-z]+(?:[-'][A-Za-z]+)*")
"""A capitalised word that does not open its sentence: a name (Kyoto, Bluefin, Marmalade)."""
_CODE = re.compile(r"(?<![A-Za-z0-9])(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[A-Z])[A-Za-z0-9]{2,}")
"""Digits and capitals together: a code, flight or model (MU9034, X1, 7Q2); not "message2", "10k" or "5pm"."""
_ORDINAL = re.compile(r"\d+(?:st|nd|rd|th|am|pm|s)", re.IGNORECASE)
_TITLE = re.compile(r"《([^》]{1,20})》")
_COMMON = frozenset(
    [
        *WEEKDAYS,
        *MONTHS,
        "christmas",
        "easter",
        "ok",
        "okay",
        "omg",
        "lol",
        "haha",
        "yeah",
        "yes",
        "no",
    ]
)
"""Capitalised words that name no thing of one chat: days, months, interjections."""


def feedback_terms(hits: Sequence[SearchHit], taken: Collection[str]) -> list[str]:
    """The terms of the names, codes and titles the best FEEDBACK_HITS of `hits` hold, none of `taken` (the
    query's terms, their related words, the speakers it names), at most FEEDBACK_TERMS."""
    out: dict[str, None] = {}
    for hit in hits[:FEEDBACK_HITS]:
        for term in _named_terms(hit.passage.text):
            if term not in taken:
                out.setdefault(term, None)
    return list(out)[:FEEDBACK_TERMS]


@lru_cache(maxsize=4096)
def _named_terms(text: str) -> tuple[str, ...]:
    names = [m.group(0) for s in _SENTENCES.findall(text) for m in _NAMED.finditer(" " + s.strip()[1:])]
    codes = [c for c in _CODE.findall(text) if not _ORDINAL.fullmatch(c)]
    found = [*names, *codes, *_TITLE.findall(text)]
    terms = (t for word in found if word.lower() not in _COMMON for t in index_terms(word)[:1])
    return tuple(dict.fromkeys(t for t in terms if t not in STOP_WORDS and len(t) >= 2))
