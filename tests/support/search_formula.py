"""The search port's ranking formula computed from scratch over generated docs, for the SQLite index's tests."""

from __future__ import annotations

import math
import random
from collections import Counter

from agenthub.storage.search_index import (
    Passage,
    SearchDoc,
    SearchScope,
    SourceRef,
    idf,
    rank_key,
    score_of,
    term_score,
)
from agenthub.storage.search_sqlite import SqliteSearchIndex

WORDS = [f"w{i}" for i in range(300)]
EVERYWHERE = SearchScope(None, agent_scoped=lambda _: True)
FRESH_ROWS = 300  # segments are written and merged within these tests' few hundred docs


def docs_of(source: SourceRef, rng: random.Random, count: int, first_seq: int = 0) -> list[SearchDoc]:
    docs = []
    for n in range(first_seq, first_seq + count):
        terms = tuple(rng.choices(WORDS, weights=[1 / (i + 1) for i in range(len(WORDS))], k=rng.randint(3, 60)))
        ts = None if n % 17 == 0 else 1_700_000_000_000 + rng.randint(0, 10**9)
        docs.append(SearchDoc(Passage(source, n, "user", None, ts, " ".join(terms)), terms))
    return docs


def expected(docs: list[SearchDoc], query: list[str], limit: int) -> list[tuple[str, int, float]]:
    """The port's formula, computed from scratch."""
    n = len(docs)
    avgdl = sum(len(d.terms) for d in docs) / n
    df = Counter(t for d in docs for t in set(d.terms))
    stamps = [d.passage.ts for d in docs if d.passage.ts is not None]
    ts_min, ts_max = min(stamps), max(stamps)
    scored = []
    for d in docs:
        tf = Counter(d.terms)
        bm25 = sum(term_score(idf(n, df[t]), tf[t], len(d.terms), avgdl) for t in query if t in tf)
        if bm25 > 0:
            scored.append((score_of(bm25, d.passage.ts, ts_min, ts_max), d.passage))
    scored.sort(key=lambda pair: rank_key(*pair))
    return [(p.session, p.seq, s) for s, p in scored[:limit]]


def found(index: SqliteSearchIndex, query: list[str], limit: int) -> list[tuple[str, int, float]]:
    return [(h.passage.session, h.passage.seq, h.score) for h in index.search(query, EVERYWHERE, limit)]


def same(found: list[tuple[str, int, float]], expected: list[tuple[str, int, float]]) -> None:
    assert [(s, q) for s, q, _ in found] == [(s, q) for s, q, _ in expected]
    assert all(math.isclose(a[2], b[2], rel_tol=1e-9) for a, b in zip(found, expected, strict=True))
