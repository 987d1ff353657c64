"""The best docs of a scope from the query terms' postings in memory, exactly as summing every posting would rank
them, without scoring every posting of the frequent terms (max-score pruning).

A term adds less than its bound (its idf × (k1 + 1), times the largest prior) to any doc's score. The lightest
terms of the query (a common word, a Chinese character in most turns: low idf, most postings) together add less than
the sum of their bounds; a doc holding none of the other terms scores below that. Once the `keep`-th best score of
the docs of the other terms (counting those terms only: a lower bound of their full scores) is above it, the best
docs are among those docs. Their full scores are then summed term after term in the query's order, as the full sum
adds them, so each is the same float; a light term's postings are only searched for those docs, never scored.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from agenthub.storage.postgres.search_cache import NO_TS, Postings
from agenthub.storage.search_index import K1, RECENCY_PRIOR, B

Floats = NDArray[np.float64]
LIGHT = 0.5
"""The light terms add at most this share of what the heaviest term may add, all together."""
SHARE = 0.5
"""The light terms' postings are at least this share of all, or every posting is scored (little to spare)."""
TRIES = 2
"""Splits tried at most: when the heavy terms' docs are too few (a rare word in one turn) or score too low, the
heaviest light term is counted with them and the split tried again."""


def pruned_top(
    terms: Sequence[tuple[float, Postings]],
    permitted: NDArray[np.bool_],
    avgdl: float,
    ts_span: tuple[int, int] | None,
    keep: int,
) -> dict[int, float] | None:
    """{doc id: bm25} of the `keep` best docs (`permitted`: by source or channel code, may the scope show it;
    `ts_span`: the prior's (min, max) time); None when pruning would not spare much, or the light terms might
    decide (then every posting is scored)."""
    order = sorted(range(len(terms)), key=lambda i: -terms[i][0])  # the weightiest first
    bounds = [w * (K1 + 1) * (1 + RECENCY_PRIOR) for w, _ in terms]
    light, tail = 0.0, set()
    for i in reversed(order[1:]):  # the lightest terms, while together they add less than half the heaviest
        if light + bounds[i] > bounds[order[0]] * LIGHT:
            break
        tail.add(i)
        light += bounds[i]
    total = sum(len(p) for _, p in terms)
    for _ in range(TRIES):
        if not tail or sum(len(terms[i][1]) for i in tail) < SHARE * total:  # no light term (or no posting at all)
            return None
        docs, partial, ts = _partial(terms, [i for i in range(len(terms)) if i not in tail], permitted, avgdl, ts_span)
        if len(docs) >= keep and np.partition(partial, len(partial) - keep)[len(partial) - keep] > light:
            return _full(terms, docs, ts, permitted, avgdl, ts_span, keep)
        heaviest = max(tail, key=lambda i: terms[i][0])  # too few docs, or too low: the next term counts too
        tail.discard(heaviest)
        light -= bounds[heaviest]
    return None


def contributions(weight: float, p: Postings, at: NDArray[np.intp] | slice, avgdl: float) -> Floats:
    """The term's BM25 addition to the docs of its postings at `at` (the formula of `search_rank._top`)."""
    tf = p.tfs[at].astype(np.float64)
    length = p.lengths[at].astype(np.float64)
    return weight * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / avgdl))


def _inside(p: Postings, permitted: NDArray[np.bool_]) -> NDArray[np.intp]:
    return np.flatnonzero(permitted[p.srcs] | permitted[p.channels])


def _partial(
    terms: Sequence[tuple[float, Postings]],
    chosen: Sequence[int],
    permitted: NDArray[np.bool_],
    avgdl: float,
    ts_span: tuple[int, int] | None,
) -> tuple[NDArray[np.int64], Floats, NDArray[np.int64]]:
    """The docs of the `chosen` terms in the scope (ascending), their scores from those terms only (prior applied)
    and their times."""
    docs, adds, times = [], [], []
    for i in chosen:
        weight, p = terms[i]
        at = _inside(p, permitted)
        docs.append(p.docs[at])
        adds.append(contributions(weight, p, at, avgdl))
        times.append(p.ts[at])
    ids, where = np.unique(np.concatenate(docs), return_inverse=True)
    ts = np.zeros(len(ids), dtype=np.int64)
    ts[where] = np.concatenate(times)
    bm25 = np.bincount(where, weights=np.concatenate(adds), minlength=len(ids))
    return ids, bm25 * _prior(ts, ts_span), ts


def _prior(ts: NDArray[np.int64], ts_span: tuple[int, int] | None) -> Floats:
    """1 + the recency prior of each time (`search_rank._top`'s)."""
    prior = np.zeros(len(ts))
    if ts_span is not None and ts_span[1] > ts_span[0]:
        stamped = ts != NO_TS
        prior[stamped] = (ts[stamped] - ts_span[0]) / (ts_span[1] - ts_span[0])
    return 1 + RECENCY_PRIOR * prior


def _full(
    terms: Sequence[tuple[float, Postings]],
    docs: NDArray[np.int64],
    ts: NDArray[np.int64],
    permitted: NDArray[np.bool_],
    avgdl: float,
    ts_span: tuple[int, int] | None,
    keep: int,
) -> dict[int, float]:
    """The full scores of `docs` (ascending): every term's contribution added in the query's order, from 0."""
    bm25 = np.zeros(len(docs))
    for weight, p in terms:
        at = np.searchsorted(docs, p.docs)
        found = at < len(docs)
        found[found] = docs[at[found]] == p.docs[found]
        found &= permitted[p.srcs] | permitted[p.channels]
        held = np.flatnonzero(found)
        bm25[at[held]] += contributions(weight, p, held, avgdl)
    score = bm25 * _prior(ts, ts_span)
    best = np.argpartition(-score, keep - 1)[:keep] if keep < len(docs) else np.arange(len(docs))
    return {int(docs[i]): float(bm25[i]) for i in best}
