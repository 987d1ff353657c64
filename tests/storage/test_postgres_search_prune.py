"""Max-score pruning of the PostgreSQL search's in-memory ranking: the best docs and their scores are exactly those
of scoring every posting, whatever the terms' frequencies, the scope and the docs' times (no database needed: the
postings are built here)."""

from __future__ import annotations

import numpy as np
import pytest

from agenthub.storage.postgres.search_cache import NO_TS, Postings
from agenthub.storage.postgres.search_prune import pruned_top
from agenthub.storage.postgres.search_rank import Ranking, summed_top
from agenthub.storage.search_index import idf

N = 20_000
SOURCES = 50


def _term(rng: np.random.Generator, df: int, stamped: bool) -> Postings:
    """A term in `df` docs (ids 1..N, each doc's length, time and source the same in every term)."""
    docs = np.sort(rng.choice(N, df, replace=False)).astype(np.int64) + 1
    ts = (1_700_000_000_000 + docs * 7) if stamped else np.where(docs % 5 == 0, NO_TS, 1_700_000_000_000 + docs * 7)
    return Postings(
        docs,
        rng.integers(1, 4, df).astype(np.int32),
        (10 + docs % 40).astype(np.int32),
        ts.astype(np.int64),
        (docs % SOURCES).astype(np.int32),
        (docs % 3).astype(np.int32),
    )


def _case(seed: int) -> tuple[list[tuple[float, Postings]], np.ndarray, Ranking]:
    rng = np.random.default_rng(seed)
    stamped = bool(seed % 2)
    dfs = [int(d) for d in rng.choice([1, 3, 20, 200, 2_000, 9_000, N], size=int(rng.integers(2, 9)))]
    terms = [(idf(N, df), _term(rng, df, stamped)) for df in dfs]
    permitted = np.zeros(SOURCES, dtype=bool)
    permitted[rng.choice(SOURCES, int(rng.integers(1, SOURCES + 1)), replace=False)] = True
    ranking = Ranking(N, 30.0, 1_700_000_000_007, 1_700_000_000_007 + 7 * N, [], [])
    return terms, permitted, ranking


def _same(pruned: dict[int, float], full: dict[int, float]) -> None:
    assert len(pruned) == len(full)
    assert sorted(pruned.values()) == sorted(full.values())  # the same floats (ties at the edge: either doc)
    for doc in pruned.keys() & full.keys():
        assert pruned[doc] == full[doc]


@pytest.mark.parametrize("keep", [1, 10, 40])
def test_pruning_finds_exactly_the_best_docs_and_scores_of_summing_every_posting(keep: int) -> None:
    pruned_cases = 0
    for seed in range(60):
        terms, permitted, ranking = _case(seed)
        assert ranking.ts_min is not None and ranking.ts_max is not None
        pruned = pruned_top(terms, permitted, ranking.avgdl, (ranking.ts_min, ranking.ts_max), keep)
        full = summed_top(terms, permitted, ranking, keep)
        if pruned is not None:
            pruned_cases += 1
            _same(pruned, full)
    assert pruned_cases >= 10  # the cases pruned are many: the comparison means something


def test_a_term_in_every_doc_is_not_scored_whole_when_rare_terms_decide() -> None:
    rng = np.random.default_rng(3)
    every, rare = _term(rng, N, True), _term(rng, 30, True)
    terms = [(idf(N, N), every), (idf(N, 30), rare)]
    permitted = np.ones(SOURCES, dtype=bool)
    ranking = Ranking(N, 30.0, 1_700_000_000_007, 1_700_000_000_007 + 7 * N, [], [])
    pruned = pruned_top(terms, permitted, ranking.avgdl, (1_700_000_000_007, 1_700_000_000_007 + 7 * N), 10)
    assert pruned is not None and set(pruned) <= set(rare.docs.tolist())
    _same(pruned, summed_top(terms, permitted, ranking, 10))


def test_terms_without_postings_leave_the_ranking_to_summing_not_an_error() -> None:
    """A term counted (df) whose postings are all gone (the docs removed after the count was read): as summing
    every posting, no doc, never a ValueError from an empty split."""
    i32, i64 = np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
    empty = Postings(i64, i32, i32, i64, i32, i32)
    permitted = np.ones(SOURCES, dtype=bool)
    ranking = Ranking(N, 30.0, 1_700_000_000_007, 1_700_000_000_007 + 7 * N, [], [])
    for terms in ([(idf(N, 3), empty)], [(idf(N, 3), empty), (idf(N, 9_000), empty)]):
        pruned = pruned_top(terms, permitted, ranking.avgdl, (1_700_000_000_007, 1_700_000_000_007 + 7 * N), 10)
        assert (pruned or {}) == summed_top(terms, permitted, ranking, 10) == {}
