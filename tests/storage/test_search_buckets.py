"""Terms that hash into the same bucket share a postings row in each segment, and still rank apart, through flushes,
merges (inline and on the merger's thread) and a purge."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from agenthub.storage.search_buckets import SEP, bucket_of
from agenthub.storage.search_index import Passage, SearchDoc, history_source
from agenthub.storage.search_sqlite import SqliteSearchIndex
from tests.support.search_formula import expected, found, same


def _colliding(groups: int) -> list[list[str]]:
    """`groups` sets of three terms, each set in one bucket."""
    by_bucket: dict[int, list[str]] = {}
    n = 0
    while sum(len(terms) >= 3 for terms in by_bucket.values()) < groups:
        term = f"k{n}"
        by_bucket.setdefault(bucket_of(term), []).append(term)
        n += 1
    return [terms[:3] for terms in by_bucket.values() if len(terms) >= 3][:groups]


def _docs(session: str, rng: random.Random, words: list[str], count: int, first: int) -> list[SearchDoc]:
    source = history_source(session)
    docs = []
    for seq in range(first, first + count):
        terms = tuple(rng.choices(words, weights=[1 / (i + 1) for i in range(len(words))], k=rng.randint(2, 12)))
        docs.append(SearchDoc(Passage(source, seq, "user", None, 1_000 + seq, " ".join(terms)), terms))
    return docs


@pytest.mark.parametrize("background", [False, True])
def test_terms_sharing_a_bucket_rank_as_the_formula_says_through_merges_and_a_purge(
    tmp_path: Path, background: bool
) -> None:
    groups = _colliding(8)
    words = [term for group in groups for term in group]
    rng = random.Random(3)
    index = SqliteSearchIndex(tmp_path / "index.sqlite3", fresh_rows=40, background_merges=background)
    everything: list[SearchDoc] = []
    for n in range(4):
        session = f"x:http:c{n}"
        for first in range(0, 120, 6):
            docs = _docs(session, rng, words, 6, first)
            index.add(history_source(session), docs, f"mark-{n}-{first}")
            everything += docs
    assert index.segments.settle(30) and index.segments.work_s["merge"] > 0
    assert index.db.execute("SELECT count(*) FROM postings").fetchone()[0] > 0
    for group in groups:
        for query in ([group[0]], [group[1]], [group[2]], group[:2], [group[0], "absent"]):
            same(found(index, query, 10), expected(everything, query, 10))

    index.drop_source(history_source("x:http:c1"))
    index.drop_source(history_source("x:http:c2"))
    kept = [d for d in everything if d.passage.session not in ("x:http:c1", "x:http:c2")]
    index.purge()
    stored = {t for (terms,) in index.db.execute("SELECT terms FROM postings") for t in terms.split(SEP)}
    assert stored == {t for d in kept for t in d.terms}
    for group in groups:
        for query in ([group[0]], group):
            same(found(index, query, 10), expected(kept, query, 10))
    index.close()
