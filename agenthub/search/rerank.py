"""The second stage of recall, the same on every backend: the index is asked twice (the query's own terms, then with
their related words, `related`), and the two lists are blended, re-ordered and thinned in Python.

- **Related words weigh half.** A passage scores its own words' BM25 score plus RELATED_WEIGHT of what the related
  words add: "Where does Nadia live?" reaches "new address: apartment 12C", yet a passage holding the asked words
  stays ahead of one that only holds related ones. What they add is divided by the square root of how many of them
  the passage holds, so two loose words of a wide topic ("adopted a puppy") do not outweigh the exact one ("beagle").
- **Newer wins.** Of two passages of one speaker in one chat that say much the same beyond the query's words (a
  value stated, then restated or changed: "got a Prius" … "sold the Prius, got a Volvo"), the newer ranks just
  above the older; a sentence both say word for word ("Yeah.", a stock "any plans for the weekend?") is left out of
  the comparison: saying it again restates nothing.
- **A named speaker's own turns count as naming them.** "What car does Evan drive?" is answered by Evan ("got a
  Volvo"), whose turn rarely holds his own name. When a query term is the speaker of a candidate, the index is asked
  once more without the names; a turn of the named speaker from that search scores what it scores there plus what the
  name adds to a turn that holds it.
- **An answer of the asked kind comes first.** A question asking when, how many, where, who, which title or which
  code (`cues`) lifts the passages holding one by CUE_BONUS: of two turns on the asked topic, the one that can
  answer.
- **When the question says when.** A question naming a time ("last week", "two weeks ago", "in March", 上周二,
  两周前, `when`) lifts the passages said in that window, seen from the newest passage of the scope (the chat's
  now), by WINDOW_BONUS (its time words are still searched: "on Saturday" may be the day a turn
  names). One asking for the first or the latest ("when did we first…", 第一次, "most recently", 最近) puts the
  earliest or the newest of the passages scoring at least ORDER_SHARE of the best (holding a word of the topic, and
  of the speaker the question names) just above the best; its order words are not searched (a "first" in a turn is
  no sign of the first time), except 最近 / "recently" (often "these days", said in the answer too).
- **Nothing shown twice.** A passage that a better hit already shows as its turn before or after, or whose words
  (case and spacing aside) a better hit already shows (a line said again, a repeated message), comes after every
  other hit, so the five hits show five different things.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache, partial

from agenthub.search.cues import AnswerCue, answer_cue
from agenthub.search.feedback import FEEDBACK_HITS, feedback_terms
from agenthub.search.related import related_terms
from agenthub.search.text import STOP_WORDS, index_terms, normalise
from agenthub.search.when import TimeAsk, mentions_time, time_ask
from agenthub.storage.search_index import MEMORY, Passage, SearchHit, identity

ENABLED = True
"""False: the index's order as it is, one search (to measure against: `bench/bench_recall.py --no-rerank`)."""
CANDIDATES = 10
"""How many hits the widened search asks the index for (at least the asked limit); the first search asks for the
limit (the widened one holds the rest), or CANDIDATES when the query has no related word (one search)."""
RELATED_WEIGHT = 0.5
"""What the related words add to a passage's score counts this much."""
NEWER_MARGIN = 0.01
"""A newer passage saying much the same as an older one is put this much (relatively) above it."""
MIN_SHARED = 2
SHARED_SHARE = 0.2
"""Two passages say much the same when they share at least MIN_SHARED terms of two or more characters (no stop
word, none of the query's) and at least SHARED_SHARE of the shorter one's such terms."""

CUE_BONUS = 0.15
"""A passage holding the kind of answer the question asks for (a time for "when", a person for "who") scores this
much (relatively) more."""

FEEDBACK_WEIGHT = 0.5
FEEDBACK_BELOW = 2
"""What the feedback search's names (`feedback`) add counts this much, and lifts a passage at most to just below
the FEEDBACK_BELOW-th best score the query's own words and their related ones gave."""

TIME_AWARE = True
"""False: a question's time words searched as any other, no window, no order (`bench/bench_recall.py --no-time`)."""
WINDOW_BONUS = 1.0
"""A passage said within the window the question names scores this much (relatively) more."""
ORDER_SHARE = {"first": 0.5, "latest": 0.8}
"""A question asking for the first or the latest: of the passages scoring at least this share of the best, the
earliest (or newest) is put just above the best ("最近" often means "these days": the latest looks closer)."""

SPEAKER_DEPTH = 20
"""How many hits the search without the names asks for (only when a query term names a speaker of a candidate)."""

Key = tuple[str, str, int | None, str]
Search = Callable[[list[str], int], list[SearchHit]]
AsyncSearch = Callable[[list[str], int], Awaitable[list[SearchHit]]]
Newest = Callable[[], int | None]
AsyncNewest = Callable[[], Awaitable[int | None]]

CANDIDATES = 50
"""How many of each ranking are fused with the nearest passages (at least the asked limit)."""


@dataclass
class _Candidate:
    hit: SearchHit
    rank: int
    score: float


def ranked(
    search: Search,
    terms: Sequence[str],
    limit: int,
    asked: str = "",
    newest: Newest | None = None,
    zone: dt.tzinfo = dt.UTC,
) -> list[SearchHit]:
    """The best `limit` hits for `terms` (of the query `asked`), `search(terms, n)` being the index's n best (the
    files' worker thread); `newest()`: the newest passage's time in the scope (asked only when `asked` names a
    time); `zone`: the calendar the question's days are read on (`scheduler.timezone`)."""
    if not ENABLED:
        return search(list(terms), limit)
    when = (
        time_ask(asked, newest() if newest is not None and mentions_time(asked) else None, zone) if TIME_AWARE else None
    )
    terms = _topic_terms(terms, when)
    extra = related_terms(terms)
    first = limit if extra else max(limit, CANDIDATES)
    hits = search(list(terms), first)
    widened = search([*terms, *extra], max(limit, CANDIDATES)) if extra else []
    names = named_speakers(terms, (*hits, *widened))
    rest = [t for t in terms if t not in names]
    nameless = search(rest, SPEAKER_DEPTH) if names and rest else []
    stage = partial(
        rerank,
        full=len(hits) >= first,
        nameless=nameless,
        names=names,
        cue=answer_cue(asked),
        related=extra,
        when=when,
    )
    best = stage(terms, hits, FEEDBACK_HITS, widened)
    told = feedback_terms(best, {*terms, *extra, *names})
    if not told:
        return stage(terms, hits, limit, widened)
    fed = search(told, limit)
    return stage(terms, hits, limit, widened, fed=fed, feedback=told, givers=_keys(best))


async def ranked_async(
    search: AsyncSearch,
    terms: Sequence[str],
    limit: int,
    asked: str = "",
    newest: AsyncNewest | None = None,
    zone: dt.tzinfo = dt.UTC,
) -> list[SearchHit]:
    """As `ranked`, for an index asked with `await` (PostgreSQL); the Python stages run on a thread."""
    if not ENABLED:
        return await search(list(terms), limit)
    when = None
    if TIME_AWARE:
        when = time_ask(asked, await newest() if newest is not None and mentions_time(asked) else None, zone)
    terms = _topic_terms(terms, when)
    extra = await asyncio.to_thread(related_terms, terms)
    first = limit if extra else max(limit, CANDIDATES)
    if extra:  # the two asks are independent: both at once (on PostgreSQL, two connections)
        hits, widened = await _both(search, (list(terms), first), ([*terms, *extra], max(limit, CANDIDATES)))
    else:
        hits, widened = await search(list(terms), first), []
    names = named_speakers(terms, (*hits, *widened))
    rest = [t for t in terms if t not in names]
    nameless = await search(rest, SPEAKER_DEPTH) if names and rest else []
    stage = partial(
        rerank,
        full=len(hits) >= first,
        nameless=nameless,
        names=names,
        cue=answer_cue(asked),
        related=extra,
        when=when,
    )
    best = await asyncio.to_thread(stage, terms, hits, FEEDBACK_HITS, widened)
    told = feedback_terms(best, {*terms, *extra, *names})
    if not told:
        return await asyncio.to_thread(stage, terms, hits, limit, widened)
    fed = await search(told, limit)
    lifted = partial(stage, fed=fed, feedback=told, givers=_keys(best))
    return await asyncio.to_thread(lifted, terms, hits, limit, widened)


async def _both(
    search: AsyncSearch, one: tuple[list[str], int], other: tuple[list[str], int]
) -> tuple[list[SearchHit], list[SearchHit]]:
    """Two independent asks of the index at once (on PostgreSQL, on two connections); either failing ends both."""

    async def ask(terms: list[str], limit: int) -> list[SearchHit]:
        return await search(terms, limit)

    asks = [asyncio.ensure_future(ask(*one)), asyncio.ensure_future(ask(*other))]
    try:
        first, second = await asyncio.gather(*asks)
    except BaseException:  # the error as raised (a TaskGroup would wrap it in a group), the other ask ended too
        for pending in asks:
            pending.cancel()
        await asyncio.gather(*asks, return_exceptions=True)
        raise
    return first, second


def _topic_terms(terms: Sequence[str], when: TimeAsk | None) -> list[str]:
    """The query's terms less its order words (when some other term is left): "first time" is when, not what."""
    if when is None or not when.words or when.searched:
        return list(terms)
    rest = [t for t in terms if t not in when.words]
    return rest or list(terms)


def _keys(hits: Sequence[SearchHit]) -> frozenset[Key]:
    return frozenset(identity(h.passage) for h in hits)


def rerank(
    terms: Sequence[str],
    hits: Sequence[SearchHit],
    limit: int,
    widened: Sequence[SearchHit] = (),
    *,
    full: bool = True,
    nameless: Sequence[SearchHit] = (),
    names: frozenset[str] = frozenset(),
    cue: AnswerCue | None = None,
    related: Sequence[str] = (),
    fed: Sequence[SearchHit] = (),
    feedback: Sequence[str] = (),
    givers: frozenset[Key] = frozenset(),
    when: TimeAsk | None = None,
) -> list[SearchHit]:
    """The best `limit` of `hits` (the index's best for the query `terms`; `full`: as many as it was asked for, so
    there may be more), `widened` (its order for the query with related words) and the turns of a speaker the query
    `names` among `nameless` (its order for the query without the names), blended, newer first among passages saying
    the same, those holding the kind of answer `cue` asks for lifted, none shown twice."""
    scores = _blend(hits, widened, full=full, related=frozenset(related))
    lifted, ceiling = _fed(scores, fed, feedback=frozenset(feedback), givers=givers)
    spoken = _by_named_speaker(hits, nameless, names)
    for key, score in spoken.items():
        scores[key] = max(scores.get(key, 0.0), score)
    pool: dict[Key, SearchHit] = {}
    lifted_hits = (h for h in fed if identity(h.passage) in lifted)  # the others have no score (none lifted)
    for hit in (*hits, *widened, *lifted_hits, *(h for h in nameless if identity(h.passage) in spoken)):
        pool.setdefault(identity(hit.passage), hit)
    candidates = [_Candidate(hit, rank, scores[key]) for rank, (key, hit) in enumerate(pool.items())]
    if cue is not None:
        for c in candidates:
            if cue.answers(c.hit.passage.text):
                c.score *= 1 + CUE_BONUS
    if when is None or when.order != "first":
        _newer_wins(candidates, set(terms))
    if when is not None:
        _timed(candidates, when, frozenset(terms) - names - STOP_WORDS - when.words, names)
    for c in candidates:  # what only the feedback lifted stays below the best the query found itself
        if identity(c.hit.passage) in lifted:
            c.score = min(c.score, ceiling)
    ordered = sorted(candidates, key=lambda c: (-round(c.score, 9), c.rank))
    return _distinct_views(ordered, limit)


def _fed(
    scores: dict[Key, float], fed: Sequence[SearchHit], *, feedback: frozenset[str], givers: frozenset[Key]
) -> tuple[set[Key], float]:
    """`scores` raised by the feedback search `fed` (the names alone: FEEDBACK_WEIGHT of their score, shared by
    the square root of how many names a passage holds; never for the passages that gave them), each at most just
    below the FEEDBACK_BELOW-th best score without it. Returns the passages it raised and that ceiling."""
    best = sorted(scores.values(), reverse=True)
    if not fed or len(best) < FEEDBACK_BELOW:
        return set(), 0.0
    ceiling = best[FEEDBACK_BELOW - 1] * (1 - NEWER_MARGIN)
    lifted = set()
    for hit in fed:
        key = identity(hit.passage)
        held = max(1, len(feedback & _all_terms(hit.passage.text)))
        score = min(ceiling, scores.get(key, 0.0) + FEEDBACK_WEIGHT * hit.score / held**0.5)
        if key not in givers and score > scores.get(key, 0.0):
            scores[key] = score
            lifted.add(key)
    return lifted, ceiling


def _blend(
    hits: Sequence[SearchHit],
    widened: Sequence[SearchHit],
    *,
    full: bool,
    related: frozenset[str] = frozenset(),
    weight: float = RELATED_WEIGHT,
) -> dict[Key, float]:
    """Each passage's score: the index's score for the query, plus RELATED_WEIGHT of what the related words add
    (the widened score less that), shared by the `related` words the passage holds (what one of them adds, about:
    two loose words of a wide topic do not outweigh the one exact word). A passage only the widened search found
    scored for the query at most what the last hit of a full first search did (and nothing when the first search
    ran out of hits)."""
    own: dict[Key, float] = {}
    for hit in hits:
        own.setdefault(identity(hit.passage), hit.score)
    floor = min(own.values()) if full and own else 0.0
    scores = dict(own)
    for hit in widened:
        key = identity(hit.passage)
        base = own.get(key, min(floor, hit.score))
        held = max(1, len(related & _all_terms(hit.passage.text))) if related else 1
        scores[key] = max(scores.get(key, 0.0), base + weight * max(0.0, hit.score - base) / held**0.5)
    return scores


@lru_cache(maxsize=4096)
def _all_terms(text: str) -> frozenset[str]:
    return frozenset(index_terms(text))


def named_speakers(terms: Sequence[str], hits: Sequence[SearchHit]) -> frozenset[str]:
    """The query terms that are the speaker of one of `hits` (or of its turn before or after)."""
    speakers = {p.speaker for h in hits for p in (h.passage, h.before, h.after) if p is not None and p.speaker}
    spoken = {t for speaker in speakers for t in _speaker_terms(speaker)}
    return frozenset(t for t in terms if t in spoken)


@lru_cache(maxsize=1024)
def _speaker_terms(speaker: str) -> frozenset[str]:
    return frozenset(t for t in index_terms(normalise(speaker)) if t not in STOP_WORDS)


def _by_named_speaker(
    hits: Sequence[SearchHit], nameless: Sequence[SearchHit], names: frozenset[str]
) -> dict[Key, float]:
    """The turns among `nameless` of a speaker the query names, each scored its score without the names plus what
    the names add where a turn holds them (the largest gain of a passage in both searches; else half the best)."""
    if not names or not nameless:
        return {}
    without = {identity(h.passage): h.score for h in nameless}
    gains = [h.score - without[k] for h in hits if (k := identity(h.passage)) in without]
    gain = max(gains, default=0.0) if gains and max(gains) > 0 else 0.5 * max(without.values())
    return {
        identity(h.passage): h.score + gain
        for h in nameless
        if h.passage.speaker and names & _speaker_terms(h.passage.speaker)
    }


def _newer_wins(candidates: Sequence[_Candidate], query: set[str]) -> None:
    """Of two passages by the same speaker in the same chat that say much the same beyond the query's own words
    (and beyond the clauses both say word for word, `_restated`), the newer scores at least NEWER_MARGIN above the
    older: what was said last is what holds now. The older's own score counts, not one it was lifted to: a chain of
    turns each sharing a little with the next lifts nothing."""
    groups: dict[tuple[str, str | None], list[_Candidate]] = {}
    for c in candidates:
        groups.setdefault((c.hit.passage.session, c.hit.passage.speaker), []).append(c)
    for members in groups.values():
        if len(members) < 2:
            continue
        members.sort(key=lambda c: c.hit.passage.ts or 0)
        topics = [_topic(c.hit.passage, query) for c in members]
        scored = [c.score for c in members]  # a lift is from what the older scored, never from a lift (no chains)
        for i, older in enumerate(members):
            if len(topics[i]) < MIN_SHARED:
                continue
            for j in range(i + 1, len(members)):
                newer, lifted = members[j], scored[i] * (1 + NEWER_MARGIN)
                later = (newer.hit.passage.ts or 0) > (older.hit.passage.ts or 0)
                if (
                    newer.score < lifted
                    and later
                    and _restated(older.hit.passage, newer.hit.passage, query, topics[i], topics[j])
                ):
                    newer.score = lifted


def _timed(
    candidates: Sequence[_Candidate], when: TimeAsk, topic: frozenset[str], names: frozenset[str] = frozenset()
) -> None:
    """The passages said within the question's window lifted by WINDOW_BONUS; for a first/latest question the
    earliest/newest passage scoring at least ORDER_SHARE of the best and holding one of the `topic` terms (the
    query's own, no name: a turn found by its speaker or by related words only is no mention of the topic), and
    said by a speaker the query `names` if it names one, put just above the best."""
    if when.window is not None:
        start, end = when.window
        for c in candidates:
            if _said_at(c) and start <= (c.hit.passage.ts or 0) < end:
                c.score *= 1 + WINDOW_BONUS
    if when.order is None or not candidates:
        return
    best = max(c.score for c in candidates)
    share = ORDER_SHARE[when.order] * best
    relevant = [
        c
        for c in candidates
        if _said_at(c)
        and c.score >= share
        and topic & _all_terms(c.hit.passage.text)
        and (not names or (c.hit.passage.speaker is not None and names & _speaker_terms(c.hit.passage.speaker)))
    ]
    if not relevant:
        return
    pick = min if when.order == "first" else max
    chosen = pick(relevant, key=lambda c: c.hit.passage.ts or 0)
    chosen.score = max(chosen.score, best * (1 + NEWER_MARGIN))


def _said_at(candidate: _Candidate) -> bool:
    """Whether the passage's time is when it was said (a memory file's lines carry the file's mtime: not)."""
    passage = candidate.hit.passage
    return passage.ts is not None and passage.source.kind != MEMORY


def _restated(older: Passage, newer: Passage, query: set[str], a: set[str], b: set[str]) -> bool:
    """Whether `newer` says much the same as `older` beyond the query's words and beyond the sentences both say
    word for word (a stock phrase said again, "周末有什么安排？", restates no value)."""
    if not _same_topic(a, b):
        return False
    common = _clauses(older.text) & _clauses(newer.text)
    if not common:
        return True
    return _same_topic(_topic_without(older.text, common, query), _topic_without(newer.text, common, query))


_CLAUSE = re.compile(r"[^.!?;,。！？；，…\n]+")


@lru_cache(maxsize=4096)
def _clauses(text: str) -> frozenset[str]:
    """A text's clauses as said (spacing and case aside): "yeah", "周末有什么安排"."""
    found = (" ".join(c.split()) for c in _CLAUSE.findall(normalise(text)))
    return frozenset(c for c in found if c)


def _topic_without(text: str, clauses: frozenset[str], query: set[str]) -> set[str]:
    kept = " ".join(c for c in _CLAUSE.findall(normalise(text)) if " ".join(c.split()) not in clauses)
    return set(_content_terms(kept)) - query


def _same_topic(a: set[str], b: set[str]) -> bool:
    shared = len(a & b)
    return shared >= MIN_SHARED and shared >= SHARED_SHARE * min(len(a), len(b))


def _topic(passage: Passage, query: set[str]) -> set[str]:
    """What a passage says beyond the query: its terms of two characters or more, no stop word, none of the
    query's."""
    return set(_content_terms(passage.text)) - query


@lru_cache(maxsize=4096)
def _content_terms(text: str) -> frozenset[str]:
    """A text's terms of two characters or more, no stop word (cached: the same turns come back query after query)."""
    return frozenset(t for t in index_terms(text) if len(t) >= 2 and t not in STOP_WORDS)


def _distinct_views(ordered: Sequence[_Candidate], limit: int) -> list[SearchHit]:
    """The first `limit`, a passage a better hit already shows (as its turn before or after, or the same words
    said elsewhere) coming only after every other: listed again only when nothing else is left to show."""
    shown: set[Key] = set()
    said: set[str] = set()
    out: list[SearchHit] = []
    again: list[SearchHit] = []
    for c in ordered:
        hit = replace(c.hit, score=c.score)
        text = _said(hit.passage.text)
        if identity(hit.passage) in shown or text in said:
            again.append(hit)
            continue
        out.append(hit)
        said.update(_said(p.text) for p in (hit.passage, hit.before, hit.after) if p is not None)
        shown.update(identity(p) for p in (hit.passage, hit.before, hit.after) if p is not None)
        if len(out) == limit:
            return out
    return [*out, *again][:limit]


def _said(text: str) -> str:
    """A passage's words as said, whatever the spacing and case: two hits saying exactly this are one to read."""
    return " ".join(normalise(text).split())
