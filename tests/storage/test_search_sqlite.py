"""The SQLite search index ranks exactly as the port's formula says, whether postings are in merged segments or still
fresh, and keeps its counts right through replaces, drops, merges, a crash and a purge."""

from __future__ import annotations

import contextlib
import random
from pathlib import Path

from agenthub.storage.search_buckets import SEP
from agenthub.storage.search_index import (
    Passage,
    SearchDoc,
    SearchScope,
    history_source,
)
from agenthub.storage.search_sqlite import SqliteSearchIndex
from tests.support.search_formula import EVERYWHERE, FRESH_ROWS
from tests.support.search_formula import docs_of as _docs
from tests.support.search_formula import expected as _expected
from tests.support.search_formula import found as _found
from tests.support.search_formula import same as _same


def test_ranking_matches_the_formula_with_fresh_and_merged_postings(tmp_path: Path) -> None:
    rng = random.Random(11)
    index = SqliteSearchIndex(tmp_path / "index.sqlite3", fresh_rows=FRESH_ROWS)
    a, b = history_source("x:http:a"), history_source("x:http:b")
    docs_a = _docs(a, rng, 200)
    index.add(a, docs_a, "mark-a")
    assert index.segments.counts()["segments"] >= 1  # some postings are in segments
    docs_b = _docs(b, rng, 5)
    index.add(b, docs_b, "mark-b")  # these wait in `fresh`
    assert index.db.execute("SELECT count(*) FROM fresh").fetchone()[0] > 0
    everything = docs_a + docs_b
    for query in (["w0"], ["w5", "w250"], ["w1", "w2", "w3", "w299"], ["w120"], ["absent", "w42"]):
        _same(_found(index, query, 10), _expected(everything, query, 10))

    replaced = _docs(b, rng, 5)
    index.replace_source(b, replaced, "mark-b2")  # fresh docs deleted (merged first)
    index.drop_source(a)
    for query in (["w0"], ["w5", "w7"]):
        _same(_found(index, query, 10), _expected(replaced, query, 10))
    assert index.stats()["docs"] == 5 and index.watermarks() == {b: "mark-b2"}
    index.purge()
    kept = {t for d in replaced for t in d.terms}
    stored = {t for (terms,) in index.db.execute("SELECT terms FROM postings") for t in terms.split(SEP)}
    assert stored == kept  # no term of a deleted doc
    assert index.db.execute("SELECT count(*) FROM fresh").fetchone()[0] == 0
    for query in (["w0"], ["w5", "w7"]):
        _same(_found(index, query, 10), _expected(replaced, query, 10))
    index.close()


def test_the_top_k_over_merged_segments_equals_scoring_every_doc(tmp_path: Path) -> None:
    """Frequent terms, many sources, segments written and merged, every limit: the formula's order."""
    rng = random.Random(5)
    index = SqliteSearchIndex(tmp_path / "index.sqlite3", fresh_rows=FRESH_ROWS)
    everything: list[SearchDoc] = []
    for n in range(12):
        source = history_source(f"x:http:c{n}")
        for first in range(0, 150, 15):  # a segment every ten docs or so
            docs = _docs(source, rng, 15, first_seq=first)
            index.add(source, docs, f"mark-{n}-{first}")
            everything += docs
    last = history_source("x:http:last")
    everything += _docs(last, rng, 4)
    index.add(last, everything[-4:], "mark-last")
    assert index.db.execute("SELECT count(*) FROM fresh").fetchone()[0] > 0  # some docs still wait, most merged
    assert index.segments.settle(30) and index.segments.work_s["merge"] > 0  # segments were merged too
    queries = (["w0"], ["w1"], ["w0", "w1"], ["w0", "w2", "w3"], ["w0", "w299"], ["w4", "w40", "w150", "w1"])
    for query in queries:
        for limit in (1, 3, 10, 40):
            _same(_found(index, query, limit), _expected(everything, query, limit))
    one_chat = [d for d in everything if d.passage.session == "x:http:c3"]
    for query in queries:
        found = [(h.passage.session, h.passage.seq, h.score) for h in index.search(query, SearchScope("x:http:c3"), 5)]
        assert found == _expected_in(everything, one_chat, query, 5)
    index.close()


def _expected_in(
    docs: list[SearchDoc], shown: list[SearchDoc], query: list[str], limit: int
) -> list[tuple[str, int, float]]:
    """The formula over every doc, keeping only the hits among `shown`."""
    allowed = {(d.passage.session, d.passage.seq) for d in shown}
    ranked = _expected(docs, query, len(docs))
    return [hit for hit in ranked if (hit[0], hit[1]) in allowed][:limit]


def test_a_crash_before_the_fresh_postings_become_a_segment_loses_nothing_searchable(tmp_path: Path) -> None:
    rng = random.Random(3)
    path = tmp_path / "index.sqlite3"
    index = SqliteSearchIndex(path, fresh_rows=FRESH_ROWS)
    a = history_source("x:http:a")
    merged = _docs(a, rng, 60)
    index.add(a, merged, "mark-1")
    waiting = _docs(a, rng, 3, first_seq=60)
    index.add(a, waiting, "mark-2")
    assert index.db.execute("SELECT count(*) FROM fresh").fetchone()[0] == 3  # not yet in a segment
    with contextlib.suppress(RuntimeError), index.transaction():  # a write cut short: none of it is kept
        index.add(a, _docs(a, rng, 2, first_seq=63), "mark-3")
        raise RuntimeError("crash")
    _same(_found(index, ["w0", "w7"], 70), _expected(merged + waiting, ["w0", "w7"], 70))
    index.db.close()  # the process dies: nothing flushed, nothing closed in order

    reopened = SqliteSearchIndex(path, fresh_rows=FRESH_ROWS)
    assert not reopened.rebuilt and reopened.watermarks() == {a: "mark-2"}
    for query in (["w0"], ["w3", "w150"], ["w0", "w7"]):
        _same(_found(reopened, query, 70), _expected(merged + waiting, query, 70))
    more = _docs(a, rng, 40, first_seq=63)
    reopened.add(a, more, "mark-4")  # the waiting docs are written into a segment with these
    assert reopened.db.execute("SELECT count(*) FROM fresh").fetchone()[0] < 40
    _same(_found(reopened, ["w0", "w7"], 200), _expected(merged + waiting + more, ["w0", "w7"], 200))
    reopened.close()


def test_a_search_right_after_an_add_finds_it_waiting_or_just_written_into_a_segment(tmp_path: Path) -> None:
    index = SqliteSearchIndex(tmp_path / "index.sqlite3", fresh_rows=FRESH_ROWS)
    a = history_source("x:http:a")
    for n in range(40):
        terms = ("common", f"only{n}", *(f"fill{n}-{i}" for i in range(12)))
        index.add(a, [SearchDoc(Passage(a, n, "user", None, 1_700_000_000_000 + n, " ".join(terms)), terms)], f"m{n}")
        hits = index.search([f"only{n}"], EVERYWHERE, 5)
        assert [h.passage.seq for h in hits] == [n]
    assert index.segments.counts()["segments"] >= 1
    assert [h.passage.seq for h in index.search(["common"], EVERYWHERE, 3)] == [39, 38, 37]  # ties: newest first
    index.close()


def test_watermarks_moved_in_a_batch_are_written_at_its_commit_and_undone_with_its_rollback(tmp_path: Path) -> None:
    rng = random.Random(12)
    path = tmp_path / "index.sqlite3"
    index = SqliteSearchIndex(path, fresh_rows=FRESH_ROWS)
    a, b = history_source("x:http:a"), history_source("x:http:b")
    index.add(a, _docs(a, rng, 3), "a1")
    index.add(b, _docs(b, rng, 3), "b1")
    with index.transaction():  # a batch: both sources known, their watermarks moved together at the commit
        index.add(a, _docs(a, rng, 2), "a2")
        index.add(b, _docs(b, rng, 2), "b2")
        assert index.watermarks() == {a: "a2", b: "b2"}
    committed = {k: v for k, v in index.stats().items() if k in ("docs", "terms", "sources")}
    with contextlib.suppress(RuntimeError), index.transaction():
        index.add(a, _docs(a, rng, 2), "a3")
        index.drop_source(b)  # the watermarks read from the table again within the transaction
        assert index.watermarks() == {a: "a3"}
        raise RuntimeError("crash")
    assert index.watermarks() == {a: "a2", b: "b2"}
    index.close()
    reopened = SqliteSearchIndex(path, fresh_rows=FRESH_ROWS)
    assert reopened.watermarks() == {a: "a2", b: "b2"}
    assert {k: v for k, v in reopened.stats().items() if k in committed} == committed
    reopened.close()
