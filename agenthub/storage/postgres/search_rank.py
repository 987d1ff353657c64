"""The best docs of a scope by the port's BM25 and prior, on PostgreSQL, exactly as scoring every doc would rank them.

Each query term's df is its packed docs' (`search_terms`, kept by the packer) and its pending docs' (counted by the
search). A search of one session scores that session's docs from their own terms and counts. A search of many
sessions sums the postings of every query term in the scope: rare terms' read from their blocks and the pending
docs, frequent terms' from the instance's memory (`search_cache`: only the docs added since its last search are
read), summed with numpy on a worker thread; when the query's weightiest terms alone decide the best docs, only
those docs are scored (`search_prune`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from agenthub.storage.postgres.search_cache import NO_TS, POSTINGS, Conn, Postings, PostingsCache, postings_of
from agenthub.storage.postgres.search_prune import pruned_top
from agenthub.storage.search_index import ARCHIVE, HISTORY, K1, MEMORY, RECENCY_PRIOR, B, idf, score_of

INLINE_POSTINGS = 10_000
"""At most this many postings are summed on the event loop (a fraction of a millisecond), more on a worker thread."""

_F = f"p.tf * {K1 + 1!r} / (p.tf + {K1!r} * ({1 - B!r} + {B!r} * p.length / %(avgdl)s))"
_PRIOR = f"(1 + {RECENCY_PRIOR!r} * coalesce((max(p.ts) - %(ts_min)s)::float8 / %(span)s, 0))"
_IN_SCOPE = "(p.src = ANY(%(sources)s::text[]) OR p.channel = ANY(%(channels)s::text[]))"
_TOP = f") s ORDER BY bm25 * {_PRIOR.replace('max(p.ts)', 'ts')} DESC, ts DESC NULLS LAST LIMIT %(keep)s"

_ALL = f"""
WITH {POSTINGS}
SELECT * FROM (SELECT p.doc, sum(w.w * {_F}) AS bm25, max(p.ts) AS ts
FROM p JOIN unnest(%(terms)s::text[], %(weights)s::float8[]) AS w(term, w) ON w.term = p.term
WHERE {_IN_SCOPE}
GROUP BY p.doc {_TOP}
"""
"""Every posting of the terms in the scope summed (few postings)."""

_SESSION = f"""
SELECT * FROM (SELECT p.doc, sum(w.w * {_F}) AS bm25, max(p.ts) AS ts
FROM (
    SELECT d.id AS doc, u.term, u.tf, d.length, d.ts FROM search_docs d
    CROSS JOIN LATERAL unnest(d.terms, d.tfs) AS u(term, tf)
    WHERE d.agent = %(agent)s AND d.terms && %(terms)s::text[]
        AND ((d.kind IN ('{HISTORY}', '{ARCHIVE}') AND d.session = %(session)s)
            OR (d.kind = '{MEMORY}' AND d.session = '' AND d.name = ANY(%(sources)s::text[])))
) p JOIN unnest(%(terms)s::text[], %(weights)s::float8[]) AS w(term, w) ON w.term = p.term
GROUP BY p.doc {_TOP}
"""
"""One session's docs (and the memory docs of the scope) that hold a query term, scored from their own terms and
counts (packed or not)."""

_RARE = f"""
WITH {POSTINGS}
SELECT p.term, p.doc, p.tf, p.length, coalesce(p.ts, %(no_ts)s), p.src, p.channel FROM p WHERE {_IN_SCOPE}
"""


@dataclass(frozen=True)
class Ranking:
    """What a search ranks with: the agent's doc count and mean length, the ts span of the prior, and the scope
    (the sources and channels the postings may come from; `session`: the one session searched)."""

    n_docs: int
    avgdl: float
    ts_min: int | None
    ts_max: int | None
    sources: list[str]
    channels: list[str]
    session: str | None = None
    prune: bool = True
    """Score only the docs the query's heavier terms decide when its light terms cannot change them
    (`search_prune`); False: every posting (the same result, for comparing)."""

    def params(self, agent: str, keep: int) -> dict[str, Any]:
        span = self.ts_max - self.ts_min if self.ts_min is not None and self.ts_max is not None else None
        return {
            "agent": agent, "avgdl": self.avgdl, "ts_min": self.ts_min, "span": span if span else None,
            "sources": self.sources, "channels": self.channels, "session": self.session, "keep": keep,
        }  # fmt: skip

    def score(self, bm25: float, ts: int | None) -> float:
        return score_of(bm25, ts, self.ts_min, self.ts_max)


async def best_docs(
    conn: Conn,
    agent: str,
    dfs: dict[str, int],
    ranking: Ranking,
    keep: int,
    cache: PostingsCache,
    generation: tuple[int, int],
) -> dict[int, float]:
    """{doc id: bm25} of the `keep` best docs of the scope for these terms (module docstring); `generation`: the
    agent's generation and packed id, read in the caller's snapshot."""
    if not dfs:
        return {}
    weights = {t: idf(ranking.n_docs, df) for t, df in dfs.items()}
    params = ranking.params(agent, keep) | {"terms": list(weights), "weights": list(weights.values())}
    params |= {"packed": generation[1], "after": [-1] * len(weights)}
    frequent = [t for t, df in dfs.items() if df >= cache.cached_df]
    if ranking.session is not None or not frequent:
        sql = _SESSION if ranking.session is not None else _ALL
        cursor = await conn.execute(sql, params)
        return {int(r[0]): float(r[1]) for r in await cursor.fetchall()}
    held = await cache.postings(conn, agent, generation[0], frequent, generation[1])
    rare = [t for t in dfs if t not in held]
    parts = dict(held)
    if rare:
        cursor = await conn.execute(_RARE, params | {"terms": rare, "after": [-1] * len(rare), "no_ts": int(NO_TS)})
        rows: dict[str, list[tuple[int, int, int, int, int, int]]] = {t: [] for t in rare}
        code = cache.codes.code
        for term, doc, tf, length, ts, src, channel in await cursor.fetchall():
            rows[term].append((doc, tf, length, ts, code(src), code(channel)))
        parts |= {t: postings_of(r) for t, r in rows.items()}
    allowed = (cache.codes.known(ranking.sources), cache.codes.known(ranking.channels))
    ordered = [(weights[t], parts[t]) for t in dfs]
    if sum(len(p) for _, p in ordered) <= INLINE_POSTINGS:  # sooner done than handed to a thread and back
        return _top(ordered, allowed, len(cache.codes), ranking, keep)
    return await asyncio.to_thread(_top, ordered, allowed, len(cache.codes), ranking, keep)


def _top(
    terms: Sequence[tuple[float, Postings]],
    allowed: tuple[NDArray[np.int32], NDArray[np.int32]],
    width: int,
    ranking: Ranking,
    keep: int,
) -> dict[int, float]:
    """Every posting in the scope scored by the port's formula, summed per doc; the `keep` best (prior applied).
    `allowed`: the source and channel codes of the scope, of `width` codes in all (every posting's are below it)."""
    permitted = np.zeros(width, dtype=bool)
    for codes in allowed:
        permitted[codes] = True
    span = None if ranking.ts_min is None or ranking.ts_max is None else (ranking.ts_min, ranking.ts_max)
    pruned = pruned_top(terms, permitted, ranking.avgdl, span, keep) if ranking.prune else None
    return summed_top(terms, permitted, ranking, keep) if pruned is None else pruned


def summed_top(
    terms: Sequence[tuple[float, Postings]], permitted: NDArray[np.bool_], ranking: Ranking, keep: int
) -> dict[int, float]:
    """`_top` by scoring every posting (`permitted`: by source or channel code, may the scope show it)."""
    docs, contributions, times = [], [], []
    for weight, p in terms:
        inside = permitted[p.srcs] | permitted[p.channels]
        every = bool(inside.all())
        tf = (p.tfs if every else p.tfs[inside]).astype(np.float64)
        length = (p.lengths if every else p.lengths[inside]).astype(np.float64)
        docs.append(p.docs if every else p.docs[inside])
        contributions.append(weight * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / ranking.avgdl)))
        times.append(p.ts if every else p.ts[inside])
    all_docs = np.concatenate(docs)
    if not len(all_docs):
        return {}
    low, high = int(all_docs.min()), int(all_docs.max())
    if high - low < 4 * len(all_docs) + 1_000_000:  # ids dense enough: sum into an array by id
        at, ids = all_docs - low, None
        size = high - low + 1
    else:
        ids, at = np.unique(all_docs, return_inverse=True)
        size = len(ids)
    bm25 = np.bincount(at, weights=np.concatenate(contributions), minlength=size)
    ts = np.zeros(size, dtype=np.int64)
    ts[at] = np.concatenate(times)
    held = np.flatnonzero(bm25 > 0)
    bm25, ts = bm25[held], ts[held]
    doc_ids = held + low if ids is None else ids[held]
    prior = np.zeros(len(held))
    if ranking.ts_min is not None and ranking.ts_max is not None and ranking.ts_max > ranking.ts_min:
        stamped = ts != NO_TS
        prior[stamped] = (ts[stamped] - ranking.ts_min) / (ranking.ts_max - ranking.ts_min)
    score = bm25 * (1 + RECENCY_PRIOR * prior)
    count = min(keep, len(held))
    best = np.argpartition(-score, count - 1)[:count] if count < len(held) else np.arange(len(held))
    return {int(doc_ids[i]): float(bm25[i]) for i in best}
