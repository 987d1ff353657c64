"""Exact top-k BM25 over the SQLite index's impact-ordered postings: read only postings that can reach the top.

The postings of a term are kept in the order (tf, dl, doc): within one tf, a shorter doc scores higher, so every
posting that can reach a score is a prefix of each tf group. A search first scores the best few postings of each
term exactly (a lower bound θ of the k-th best score), then, by a max-score bound, reads only the postings whose
own contribution could lift a doc to θ: a doc whose every term contributes at most its share of θ / 1.1 cannot get
there (the recency prior is at most 1.1). Terms are read rarest first, θ rising as their docs are scored; the docs
read are scored exactly from their stored term lists. The result is the top-k of scoring every doc
(`agenthub.storage.search_index`); only less is read.
"""

from __future__ import annotations

import heapq
import json
import sqlite3
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agenthub.storage.search_index import K1, RECENCY_PRIOR, B, idf, score_of, term_score

SEEDS_PER_GROUP = 512
"""The best postings of each (term, tf) group read first (the docs strongest over them give the lower bound θ)."""
READ_ALL_DF = 1000
"""A term in at most this many docs is read whole (cheap, and its docs raise θ for the frequent terms)."""
_MARGIN = 1e-9  # θ is lowered by this share: float error never drops a doc that belongs in the top
_CHUNK = 64  # docs scored exactly at a time, best bound first


@dataclass(frozen=True)
class Ranking:
    """What a search ranks with: the agent's doc count and mean length, the ts span of the prior, and the docs it
    may return (source ids)."""

    n_docs: int
    avgdl: float
    ts_min: int | None
    ts_max: int | None
    allowed: frozenset[int]


def pack_terms(term_ids: Sequence[int], tfs: Sequence[int]) -> bytes:
    """A doc's stored term list: its term ids, then their tfs (same order)."""
    return array("q", [*term_ids, *tfs]).tobytes()


def unpack_terms(blob: bytes) -> tuple[array[int], array[int]]:
    values = array("q", blob)
    half = len(values) // 2
    return values[:half], values[half:]


def best_docs(
    db: sqlite3.Connection,
    found: Sequence[tuple[int | None, str, int]],
    fresh: Sequence[tuple[int, str, int, int, int, int | None]],
    ranking: Ranking,
    keep: int,
    scope_docs: Sequence[int] | None = None,
) -> dict[int, tuple[float, int | None]]:
    """The `keep` best allowed docs as {doc id: (score, ts)}. `found`: (term id or None when only in `fresh`, term,
    df) of the query's terms, in query order; `fresh`: the rows of `fresh` (doc, term, tf, dl, source, ts) holding
    query terms; `scope_docs`: every doc of a small scope, scored directly instead."""
    weights = {term_id: idf(ranking.n_docs, df) for term_id, _, df in found if term_id is not None}
    scored = _fresh_scores(fresh, {term: idf(ranking.n_docs, df) for _, term, df in found}, ranking)
    scorer = _Scorer(db, weights, ranking)
    if scope_docs is not None:
        scorer.score(scope_docs)
    else:
        dfs = {term_id: df for term_id, _, df in found if term_id is not None}
        _TopK(db, scorer, scored, keep, dfs).run()
    return _best({**scored, **scorer.scores}, keep)


class _TopK:
    """One bounded read of the merged postings (module docstring); exact scores land in `scorer.scores`."""

    def __init__(
        self,
        db: sqlite3.Connection,
        scorer: _Scorer,
        fresh: dict[int, tuple[float, int | None]],
        keep: int,
        dfs: dict[int, int],
    ) -> None:
        self.db, self.scorer, self.fresh, self.keep, self.dfs = db, scorer, fresh, keep, dfs
        self.weights, self.avgdl = scorer.weights, scorer.ranking.avgdl
        self.groups = {term_id: _groups(db, term_id) for term_id in self.weights}
        self.partial: dict[int, float] = {}  # bm25 summed over the terms read so far that returned the doc
        self.lengths: dict[int, int] = {}
        self.hit_by: dict[int, int] = {}  # the terms read that returned the doc (bit n: the n-th term read)
        self.floors: list[tuple[int, float]] = []  # per term read: f(tf, dl) of its unreturned postings is at most
        self.missing: dict[tuple[int, int], float] = {}  # (terms that returned a doc, its length): their bound

    def run(self) -> None:
        self.probe()
        self.read_terms()
        self.finish()

    def floor(self) -> float:
        """What a doc's bm25 must reach to possibly be in the top (θ / the largest prior, a hair lower)."""
        theta = _kth([*self.scorer.scores.values(), *self.fresh.values()], self.keep)
        return theta / (1 + RECENCY_PRIOR) * (1 - _MARGIN)

    def probe(self) -> None:
        """A first θ: the best postings of each term summed, docs strong in several terms scored exactly."""
        probe: dict[int, float] = {}
        for term_id, by_tf in self.groups.items():
            weight = self.weights[term_id]
            for tf, rows in by_tf.items():
                for dl, doc_id in rows:
                    probe[doc_id] = probe.get(doc_id, 0.0) + term_score(weight, tf, dl, self.avgdl)
        self.scorer.score(heapq.nlargest(8 * self.keep, probe, key=probe.__getitem__))

    def read_terms(self) -> None:
        """Rarest first (their docs raise θ for the frequent ones), each term's postings above its share of θ."""
        bounds = {t: _upper(self.weights[t], by_tf, self.avgdl) for t, by_tf in self.groups.items()}
        spent, left = 0.0, sum(bounds.values())
        order = sorted(bounds, key=lambda t: self.dfs[t])
        for n, term_id in enumerate(order):
            budget = max(0.0, self.floor() - spent)
            share = budget * bounds[term_id] / left if left > 0 and self.dfs[term_id] > READ_ALL_DF else 0.0
            self.read(n, term_id, share / self.weights[term_id])
            spent, left = spent + share, left - bounds[term_id]
            if n < len(order) - 1:
                best = heapq.nlargest(4 * self.keep, self.partial, key=self.partial.__getitem__)
                self.scorer.score(best)  # θ rises for the next term

    def read(self, n: int, term_id: int, floor: float) -> None:
        weight = self.weights[term_id]
        partial, lengths, hit_by = self.partial, self.lengths, self.hit_by
        self.floors.append((term_id, floor))
        contribution: dict[tuple[int, int], float] = {}
        for tf, dl, doc_id in _above(self.db, term_id, self.groups[term_id], floor, self.avgdl):
            c = contribution.get((tf, dl))
            if c is None:
                c = contribution[tf, dl] = term_score(weight, tf, dl, self.avgdl)
            partial[doc_id] = partial.get(doc_id, 0.0) + c
            lengths[doc_id] = dl
            hit_by[doc_id] = hit_by.get(doc_id, 0) | 1 << n

    def bound(self, doc_id: int) -> float:
        """At most the doc's bm25: what the terms that returned it gave, plus for each term that did not, the most
        a posting of that term at the doc's length gives while staying under the term's floor (0 for none)."""
        key = (self.hit_by[doc_id], self.lengths[doc_id])
        missing = self.missing.get(key)
        if missing is None:
            hit, dl = key
            missing = 0.0
            for n, (term_id, floor) in enumerate(self.floors):
                if not hit & 1 << n:
                    below = [term_score(1.0, tf, dl, self.avgdl) for tf in self.groups[term_id]]
                    missing += self.weights[term_id] * max((f for f in below if f <= floor), default=0.0)
            self.missing[key] = missing
        return self.partial[doc_id] + missing

    def finish(self) -> None:
        """The docs read, best bound first, scored exactly until the next bound is below θ."""
        floor = self.floor()
        bounded = sorted(((b, d) for d in self.partial if (b := self.bound(d)) >= floor), reverse=True)
        for start in range(0, len(bounded), _CHUNK):
            if bounded[start][0] < self.floor():
                return
            self.scorer.score(d for _, d in bounded[start : start + _CHUNK])


def _best(scored: dict[int, tuple[float, int | None]], keep: int) -> dict[int, tuple[float, int | None]]:
    best = sorted(
        scored.items(), key=lambda item: (-round(item[1][0], 9), -(item[1][1] if item[1][1] is not None else -1))
    )
    return dict(best[:keep])


def _kth(values: Iterable[tuple[float, int | None]], keep: int) -> float:
    """The keep-th best score found so far (a lower bound of the final one), 0 while fewer are found."""
    scores = heapq.nlargest(keep, (score for score, _ in values))
    return scores[-1] if len(scores) >= keep else 0.0


def _fresh_scores(
    rows: Sequence[tuple[int, str, int, int, int, int | None]], weights: dict[str, float], ranking: Ranking
) -> dict[int, tuple[float, int | None]]:
    """Docs still in `fresh` are scored from all their rows there (none of their postings is merged)."""
    parts: dict[int, list[tuple[str, float]]] = {}
    stamps: dict[int, int | None] = {}
    for doc_id, term, tf, dl, source_id, ts in rows:
        if source_id in ranking.allowed and term in weights:
            parts.setdefault(doc_id, []).append((term, term_score(weights[term], tf, dl, ranking.avgdl)))
            stamps[doc_id] = ts
    order = {term: i for i, term in enumerate(weights)}
    scores: dict[int, tuple[float, int | None]] = {}
    for doc_id, terms in parts.items():
        bm25 = sum(s for _, s in sorted(terms, key=lambda pair: order[pair[0]]))
        scores[doc_id] = (score_of(bm25, stamps[doc_id], ranking.ts_min, ranking.ts_max), stamps[doc_id])
    return scores


def _groups(db: sqlite3.Connection, term_id: int) -> dict[int, list[tuple[int, int]]]:
    """{tf: its shortest docs as (dl, doc id)} of a term (one seek per distinct tf)."""
    groups: dict[int, list[tuple[int, int]]] = {}
    tf = 0
    while True:
        row = db.execute("SELECT tf FROM postings WHERE term_id = ? AND tf > ? LIMIT 1", (term_id, tf)).fetchone()
        if row is None:
            return groups
        tf = int(row[0])
        groups[tf] = db.execute(
            "SELECT dl, doc_id FROM postings WHERE term_id = ? AND tf = ? LIMIT ?", (term_id, tf, SEEDS_PER_GROUP)
        ).fetchall()


def _upper(weight: float, by_tf: dict[int, list[tuple[int, int]]], avgdl: float) -> float:
    """The most any posting of the term contributes (each tf group's shortest doc)."""
    return max((term_score(weight, tf, rows[0][0], avgdl) for tf, rows in by_tf.items() if rows), default=0.0)


def _above(
    db: sqlite3.Connection, term_id: int, by_tf: dict[int, list[tuple[int, int]]], floor: float, avgdl: float
) -> list[tuple[int, int, int]]:
    """Docs where the term's f(tf, dl) = tf(k1+1) / (tf + k1(1 - b + b dl / avgdl)) exceeds `floor` (× its idf:
    the contribution exceeds its share of the budget), as (tf, dl, doc id): per tf, the docs shorter than the bound
    solved for dl."""
    rows: list[tuple[int, int, int]] = []
    for tf in by_tf:
        if floor <= 0:
            limit = None
        else:
            limit = (tf * (K1 + 1) / floor - tf - K1 * (1 - B)) * avgdl / (K1 * B)
            if limit < 0:
                continue
        sql = "SELECT tf, dl, doc_id FROM postings WHERE term_id = ? AND tf = ?"
        params: tuple[object, ...] = (term_id, tf)
        if limit is not None:
            sql += " AND dl <= ?"
            params += (int(limit) + 1,)  # a superset at the edge: scored exactly anyway
        rows += db.execute(sql, params).fetchall()
    return rows


class _Scorer:
    """Exact scores of merged docs, each read once (its length, time, source and term list)."""

    def __init__(self, db: sqlite3.Connection, weights: dict[int, float], ranking: Ranking) -> None:
        self.db = db
        self.weights = weights
        self.ranking = ranking
        self.seen: set[int] = set()
        self.scores: dict[int, tuple[float, int | None]] = {}

    def score(self, doc_ids: Iterable[int]) -> None:
        todo = [d for d in dict.fromkeys(doc_ids) if d not in self.seen]
        if not todo:
            return
        self.seen.update(todo)
        ranking, weights = self.ranking, self.weights
        for i in range(0, len(todo), 20000):
            rows = self.db.execute(
                "SELECT id, dl, ts, source_id, tids FROM docs WHERE id IN (SELECT value FROM json_each(?))",
                (json.dumps(todo[i : i + 20000]),),
            )
            for doc_id, dl, ts, source_id, tids in rows:
                if source_id not in ranking.allowed:
                    continue
                ids, tfs = unpack_terms(tids)
                bm25, hit = 0.0, False
                for term_id, weight in weights.items():
                    try:
                        at = ids.index(term_id)
                    except ValueError:
                        continue
                    bm25 += term_score(weight, tfs[at], dl, ranking.avgdl)
                    hit = True
                if hit:
                    self.scores[doc_id] = (score_of(bm25, ts, ranking.ts_min, ranking.ts_max), ts)
