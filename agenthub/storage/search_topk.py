"""Exact BM25 top-k over the files index's postings, vectorised: every posting of the query's terms is scored.

A term's postings are two int32 arrays (doc ids, tfs); each doc's source, length and time are columns in memory
(`DocColumns`), so scoring a term is a few numpy operations over its array, however frequent the term is. The
floats are computed with the same operations in the same order as `agenthub.storage.search_index` (`term_score`,
`score_of`), so the scores and the order are the port's, bit for bit; nothing is skipped, so no bound can be wrong.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from agenthub.storage.search_index import K1, RECENCY_PRIOR, B, idf

IDS = np.dtype("<i4")
"""How doc ids and tfs are stored in a postings blob (little-endian int32)."""
_TIE = 2e-9  # scores this close may round to the same 9 decimals: kept for the exact order
Ints = NDArray[np.int32]


@dataclass(frozen=True)
class Ranking:
    """What a search ranks with: the agent's doc count and mean length, the ts span of the prior."""

    n_docs: int
    avgdl: float
    ts_min: int | None
    ts_max: int | None


class DocColumns:
    """Per doc id: its source id (0: no such doc, or deleted), length and time (`has_ts` False: none); arrays that
    grow as docs are added."""

    def __init__(self, size: int = 1024) -> None:
        self.source = np.zeros(size, np.int32)
        self.length = np.zeros(size, np.float64)  # exact (integers), a float as term_score uses it
        self.ts = np.zeros(size, np.int64)
        self.has_ts = np.zeros(size, np.bool_)

    def put(self, doc_id: int, source_id: int, dl: int, ts: int | None) -> None:
        if doc_id >= len(self.source):
            self._grow(doc_id + 1)
        self.source[doc_id], self.length[doc_id] = source_id, dl
        self.ts[doc_id], self.has_ts[doc_id] = (ts, True) if ts is not None else (0, False)

    def put_many(self, first: int, source_id: int, dls: Sequence[int], stamps: Sequence[int | None]) -> None:
        """Docs `first`, `first + 1`, ... of one source, with these lengths and times."""
        end = first + len(dls)
        if end > len(self.source):
            self._grow(end)
        self.source[first:end] = source_id
        self.length[first:end] = dls
        self.ts[first:end] = [0 if ts is None else ts for ts in stamps]
        self.has_ts[first:end] = [ts is not None for ts in stamps]

    def drop(self, doc_ids: Iterable[int]) -> None:
        ids = [d for d in doc_ids if d < len(self.source)]
        self.source[ids] = 0

    def alive(self, docs: Ints) -> NDArray[np.bool_]:
        """Which of these doc ids are stored docs."""
        inside: NDArray[np.bool_] = docs < len(self.source)
        if inside.all():
            stored: NDArray[np.bool_] = self.source[docs] != 0
            return stored
        stored = self.source[np.where(inside, docs, 0)] != 0
        return inside & stored

    def _grow(self, need: int) -> None:
        size = max(need, 2 * len(self.source))
        for name in ("source", "length", "ts", "has_ts"):
            old = getattr(self, name)
            new = np.zeros(size, old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)


def best_docs(
    postings: Sequence[tuple[Ints, Ints]],
    columns: DocColumns,
    allowed: NDArray[np.bool_] | None,
    ranking: Ranking,
    keep: int,
) -> dict[int, tuple[float, int | None]]:
    """The `keep` best docs as {doc id: (score, ts)}, best first (score rounded to 9 decimals, then newer first).
    `postings`: each query term's (doc ids, tfs), in query order (ids of docs no longer stored are not counted);
    `allowed`: by source id, whether the scope shows its docs (False for 0); None: it shows every source."""
    acc = np.zeros(len(columns.source), np.float64)
    avgdl = ranking.avgdl
    for docs, tfs in postings:
        source = columns.source[docs]
        df = int(np.count_nonzero(source))  # stored docs only (a deleted doc's id may linger in a segment)
        if df == 0:
            continue
        weight = idf(ranking.n_docs, df)
        if allowed is not None:
            shown = allowed[source]  # source 0 (no doc) is never allowed
            if not shown.all():
                docs, tfs = docs[shown], tfs[shown]
        elif df < len(docs):
            shown = source != 0
            docs, tfs = docs[shown], tfs[shown]
        tf = tfs.astype(np.float64)
        dl = columns.length[docs]
        acc[docs] += weight * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))  # term_score, same operations
    hit = np.flatnonzero(acc)
    if len(hit) > keep:  # the prior lifts a score by at most RECENCY_PRIOR: a doc whose bm25 is that far below the
        bm25 = acc[hit]  # keep-th best bm25 cannot reach the top (only the others get their prior computed)
        kth_bm25 = float(np.partition(bm25, len(bm25) - keep)[len(bm25) - keep])
        hit = hit[bm25 >= kth_bm25 / (1 + RECENCY_PRIOR) - _TIE]
    score = acc[hit] * (1 + RECENCY_PRIOR * _recency(columns, hit, ranking))  # score_of
    if len(hit) > keep:
        kth = np.partition(score, len(score) - keep)[len(score) - keep]
        near = score >= kth - _TIE
        hit, score = hit[near], score[near]
    stamps = [int(t) if has else None for t, has in zip(columns.ts[hit], columns.has_ts[hit], strict=True)]
    found = sorted(
        zip(hit.tolist(), score.tolist(), stamps, strict=True),
        key=lambda item: (-round(item[1], 9), -(item[2] if item[2] is not None else -1)),
    )
    return {doc_id: (score_, ts) for doc_id, score_, ts in found[:keep]}


def _recency(columns: DocColumns, hit: NDArray[np.intp], ranking: Ranking) -> NDArray[np.float64]:
    """`search_index.recency` of each hit: (ts - ts_min) / (ts_max - ts_min), 0 without a ts or a span."""
    ts_min, ts_max = ranking.ts_min, ranking.ts_max
    if ts_min is None or ts_max is None or ts_max <= ts_min:
        return np.zeros(len(hit), np.float64)
    r = (columns.ts[hit] - ts_min) / (ts_max - ts_min)  # ints below 2**53: exact, then one rounded division
    return np.where(columns.has_ts[hit], r, 0.0)
