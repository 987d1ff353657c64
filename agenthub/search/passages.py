"""Ranked hits as the model reads them: each passage with the turn before and after, the whole answer cut to a
budget shared by the hits (five hits with their neighbours fit ANSWER_CHARS)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

from agenthub.search.text import normalise
from agenthub.session_keys import SessionKey
from agenthub.storage.search_index import ARCHIVE, MEMORY, Passage, SearchHit, identity

Key = tuple[str, str, int | None, str]

ANSWER_CHARS = 3400
"""The whole answer of up to five hits, header line included, stays within this many characters: a reader that
keeps only the first ~3,500 characters still sees the fifth hit and its neighbours. More hits share it down to
MIN_HIT_CHARS each; a hit shorter than its share leaves the rest to the others."""
HIT_CHARS = 700
"""At most this many characters per hit, its headers and neighbours included."""
MIN_HIT_CHARS = 320
MIN_NEIGHBOUR_CHARS = 60
"""A neighbour longer than its share is cut around the query's words, but keeps at least this much."""


def format_hits(
    query: str,
    hits: Sequence[SearchHit],
    terms: Sequence[str],
    labels: Mapping[str, str],
    zone: dt.tzinfo = dt.UTC,
) -> str:
    """The answer of `memory_search`: its times on the clock of `zone` (`scheduler.timezone`)."""
    shown = " ".join(query.split())
    shown = shown if len(shown) <= 80 else shown[:80] + "…"
    if not hits:
        return f'no matches for "{shown}"'
    head = f'{len(hits)} match{"es" if len(hits) > 1 else ""} for "{shown}", best first:'
    seen: dict[Key, int] = {}
    blocks = [_Block(number, hit, labels, seen, zone) for number, hit in enumerate(hits, start=1)]
    budgets = _shares([b.full for b in blocks], ANSWER_CHARS - len(head) - len(blocks), len(blocks))
    return "\n".join([head, *(b.render(terms, budget) for b, budget in zip(blocks, budgets, strict=True))])


def _shares(wants: Sequence[int], total: int, count: int) -> list[int]:
    """Each hit's budget: an even share of `total` (within MIN_HIT_CHARS..HIT_CHARS); a hit wanting less takes what
    it wants and the rest goes to the others (water-filling)."""
    budgets = [0] * count
    left, open_ = total, sorted(range(count), key=lambda i: wants[i])
    while open_:
        share = min(HIT_CHARS, max(MIN_HIT_CHARS, left // len(open_)))
        i = open_.pop(0)
        budgets[i] = min(wants[i], share)
        left -= budgets[i]
    return budgets


class _Block:
    """One hit's lines: `N. [where] role time weekday (speaker): passage`, then `(before)` and `(after)` (their
    time without the date when it is the hit's day; a turn an earlier hit already shows only named: `see 2.`)."""

    def __init__(
        self, number: int, hit: SearchHit, labels: Mapping[str, str], seen: dict[Key, int], zone: dt.tzinfo
    ) -> None:
        self.head = f"{number}. [{where(hit.passage, labels)}] {_line(hit.passage, zone, weekday=True)}"
        self.text = " ".join(hit.passage.text.split())
        day = _day(hit.passage.ts, zone)
        self.around = []
        for label, p in (("before", hit.before), ("after", hit.after)):
            if p is None:
                continue
            if (shown := seen.get(identity(p))) is not None:
                self.around.append((f"   ({label}) see {shown}.", "", False))
                continue
            self.around.append((f"   ({label}) {_line(p, zone, day)}", " ".join(p.text.split()), label == "before"))
        for p in (hit.passage, hit.before, hit.after):
            if p is not None:
                seen.setdefault(identity(p), number)
        self.heads = len(self.head) + sum(len(h) + 1 for h, _, _ in self.around)
        self.full = self.heads + len(self.text) + sum(len(t) for _, t, _ in self.around)

    def render(self, terms: Sequence[str], budget: int) -> str:
        room = max(80 + MIN_NEIGHBOUR_CHARS * sum(1 for _, t, _ in self.around if t), budget - self.heads)
        sizes = _split(room, len(self.text), [len(t) for _, t, _ in self.around])
        lines = [self.head + excerpt(self.text, terms, sizes[0])]
        for (head, text, tail), size in zip(self.around, sizes[1:], strict=True):
            lines.append(head + excerpt(text, terms, size, tail=tail))
        return "\n".join(lines)


def _split(room: int, main: int, neighbours: Sequence[int]) -> list[int]:
    """The passage's and its neighbours' characters within `room`: the passage first (at least half, or what the
    neighbours leave), the neighbours sharing the rest evenly (one shorter than its share leaves it to the other)."""
    floor = sum(min(MIN_NEIGHBOUR_CHARS, n) for n in neighbours)
    first = min(main, max(room // 2, room - sum(neighbours)), room - floor)
    rest = room - first
    order = sorted(range(len(neighbours)), key=lambda k: neighbours[k])
    given = [0] * len(neighbours)
    for n, k in enumerate(order):
        given[k] = min(neighbours[k], rest // (len(order) - n))
        rest -= given[k]
    return [first, *given]


def where(passage: Passage, labels: Mapping[str, str]) -> str:
    if passage.kind == MEMORY:
        return labels.get(passage.source.name, "memory")
    try:
        key = SessionKey.parse(passage.session)
        name = f"session {key.channel}:{key.chat_id}"
    except ValueError:
        name = f"session {passage.session}"
    return name + ", archived" if passage.kind == ARCHIVE else name


def _line(passage: Passage, zone: dt.tzinfo, day: str | None = None, *, weekday: bool = False) -> str:
    """The head of a passage's line: role, time (only the clock when it is on `day`; with `weekday`, its day of the
    week after it, so "last Saturday" can be dated), speaker."""
    speaker = f" ({passage.speaker})" if passage.speaker is not None else ""
    when = iso(passage.ts, zone)
    if day is not None and _day(passage.ts, zone) == day:
        when = when[11:16]
    elif weekday and passage.ts is not None:
        when += " " + _local(passage.ts, zone).strftime("%a")
    return f"{passage.role} {when}{speaker}: "


def iso(ts: int | None, zone: dt.tzinfo) -> str:
    if ts is None:
        return "(time unknown)"
    return _local(ts, zone).isoformat(timespec="seconds")


def _day(ts: int | None, zone: dt.tzinfo) -> str | None:
    return None if ts is None else _local(ts, zone).date().isoformat()


def _local(ts: int, zone: dt.tzinfo) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts / 1000, tz=zone)


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
