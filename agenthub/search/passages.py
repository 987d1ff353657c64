"""Ranked hits as the model reads them: each passage with the turn before and after, cut to a budget per hit."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

from agenthub.search.text import normalise
from agenthub.session_keys import SessionKey
from agenthub.storage.search_index import ARCHIVE, MEMORY, Passage, SearchHit

HIT_CHARS = 700
"""About this many characters per hit, its header and neighbours included (5 hits ≈ 3,500)."""
NEIGHBOUR_CHARS = 130


def format_hits(query: str, hits: Sequence[SearchHit], terms: Sequence[str], labels: Mapping[str, str]) -> str:
    shown = " ".join(query.split())
    shown = shown if len(shown) <= 80 else shown[:80] + "…"
    if not hits:
        return f'no matches for "{shown}"'
    lines = [f'{len(hits)} match{"es" if len(hits) > 1 else ""} for "{shown}", best first:']
    for number, hit in enumerate(hits, start=1):
        lines.append(format_hit(number, hit, terms, labels))
    return "\n".join(lines)


def format_hit(number: int, hit: SearchHit, terms: Sequence[str], labels: Mapping[str, str]) -> str:
    """`N. [where] role time (speaker): passage`, then the turn before and the turn after it, within HIT_CHARS
    (headers included)."""
    around = [(label, p) for label, p in (("before", hit.before), ("after", hit.after)) if p is not None]
    head = f"{number}. [{where(hit.passage, labels)}] {_line(hit.passage)}"
    heads = [f"   ({label}) {_line(passage)}" for label, passage in around]
    budget = HIT_CHARS - len(head) - sum(len(h) + 1 for h in heads)
    neighbour = min(NEIGHBOUR_CHARS, max(40, budget // 4))
    lines = [head + excerpt(hit.passage.text, terms, max(80, budget - neighbour * len(around)))]
    for (label, passage), line_head in zip(around, heads, strict=True):
        lines.append(line_head + excerpt(passage.text, terms, neighbour, tail=label == "before"))
    return "\n".join(lines)


def where(passage: Passage, labels: Mapping[str, str]) -> str:
    if passage.kind == MEMORY:
        return labels.get(passage.source.name, "memory")
    try:
        key = SessionKey.parse(passage.session)
        name = f"session {key.channel}:{key.chat_id}"
    except ValueError:
        name = f"session {passage.session}"
    return name + ", archived" if passage.kind == ARCHIVE else name


def _line(passage: Passage) -> str:
    """The head of a passage's line: role, time, speaker."""
    speaker = f" ({passage.speaker})" if passage.speaker is not None else ""
    return f"{passage.role} {iso(passage.ts)}{speaker}: "


def iso(ts: int | None) -> str:
    if ts is None:
        return "(time unknown)"
    return dt.datetime.fromtimestamp(ts / 1000, tz=dt.UTC).astimezone().isoformat(timespec="seconds")


def excerpt(text: str, terms: Sequence[str], budget: int, *, tail: bool = False) -> str:
    """At most `budget` characters of `text` on one line: the window holding most of the query's terms (the
    start, or for `tail` the end, when none is found)."""
    flat = " ".join(text.split())
    if len(flat) <= budget:
        return flat
    budget = max(budget - 2, 10)
    start = _best_window(flat, terms, budget)
    if start is None:
        start = len(flat) - budget if tail else 0
    piece = flat[start : start + budget]
    return ("…" if start > 0 else "") + piece + ("…" if start + budget < len(flat) else "")


def _best_window(flat: str, terms: Sequence[str], budget: int) -> int | None:
    """Where a window of `budget` characters covers the most distinct terms (stems match as prefixes)."""
    lowered = normalise(flat)
    if len(lowered) != len(flat):  # a folded form changed the length: positions would not match
        lowered = flat.lower()
    found = sorted((p, t) for t in terms for p in _starts(lowered, t))
    if not found:
        return None
    best, best_count = found[0][0], 0
    for position, _ in found:
        covered = {t for p, t in found if position <= p < position + budget}
        if len(covered) > best_count:
            best, best_count = position, len(covered)
    return max(0, min(best - budget // 5, len(flat) - budget))


def _starts(text: str, term: str, most: int = 8) -> list[int]:
    """Up to `most` places to look for `term` from (each occurrence once)."""
    starts: list[int] = []
    at = text.find(term)
    while at >= 0 and len(starts) < most:
        starts.append(at)
        at = text.find(term, at + 1)
    return starts
