"""Segments are merged on the merger's own thread and connections: searches and writes on the index's thread go on
while a merge is in progress, give the same ranking before, during and after it, and a merge cut short loses
nothing and leaves nothing behind."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

from agenthub.storage.search_index import SearchDoc, history_source
from agenthub.storage.search_segments import FAN_IN
from agenthub.storage.search_sqlite import SqliteSearchIndex
from agenthub.storage.search_traffic import SearchTraffic
from tests.support.search_formula import docs_of as _docs
from tests.support.search_formula import expected as _expected
from tests.support.search_formula import found as _found
from tests.support.search_formula import same as _same

QUERIES = (["w0"], ["w1", "w7"], ["w3", "w150", "w299"])


class _Pause:
    """An `on_merge_chunk` that holds the merger after its first committed chunk until released."""

    def __init__(self) -> None:
        self.paused = threading.Event()
        self.release = threading.Event()
        self.chunks = 0

    def __call__(self) -> None:
        self.chunks += 1
        if self.chunks == 1:
            self.paused.set()
            assert self.release.wait(60)


def _fill(index: SqliteSearchIndex, rng: random.Random, segments: int) -> list[SearchDoc]:
    """Docs added one source at a time until `segments` segments were written."""
    everything: list[SearchDoc] = []
    n = 0
    while index.segments.work_s["flush"] == 0 or len(everything) < segments * 8:
        source = history_source(f"x:http:m{n}")
        docs = _docs(source, rng, 8)
        index.add(source, docs, f"mark-{n}")
        everything += docs
        n += 1
    return everything


def test_searches_and_appends_are_answered_while_a_large_merge_is_in_progress(tmp_path: Path) -> None:
    pause = _Pause()
    index = SqliteSearchIndex(tmp_path / "index.sqlite3", fresh_rows=100, merge_chunk_rows=5, on_merge_chunk=pause)
    rng = random.Random(21)
    everything = _fill(index, rng, FAN_IN + 2)
    assert pause.paused.wait(60)  # a merge of FAN_IN segments, tens of chunks, is under way and held
    merger = index.segments.merger
    assert merger is not None and merger.merging.is_set()
    try:
        for query in QUERIES:  # answered on this (the index's) thread while the merge holds its snapshot
            _same(_found(index, query, 10), _expected(everything, query, 10))
        late = history_source("x:http:late")
        more = _docs(late, rng, 30)
        index.add(late, more, "mark-late")  # a write goes through between the merge's chunks
        everything += more
        for query in QUERIES:
            _same(_found(index, query, 10), _expected(everything, query, 10))
        assert merger.merging.is_set()  # still the same merge
    finally:
        pause.release.set()
    assert index.segments.settle(60) and pause.chunks > 2
    assert index.segments.work_s["merge"] > 0
    for query in QUERIES:
        _same(_found(index, query, 10), _expected(everything, query, 10))
    assert index.db.execute("SELECT count(*) FROM segments WHERE building = 1").fetchone()[0] == 0
    orphans = "SELECT count(*) FROM postings WHERE seg NOT IN (SELECT seg FROM segments)"
    assert index.db.execute(orphans).fetchone()[0] == 0  # the merged segments' postings are deleted
    index.close()


def test_a_merge_cut_short_loses_nothing_and_its_rows_are_removed(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite3"
    pause = _Pause()
    index = SqliteSearchIndex(path, fresh_rows=100, merge_chunk_rows=5, on_merge_chunk=pause)
    everything = _fill(index, random.Random(8), FAN_IN + 1)
    assert pause.paused.wait(60)
    assert index.db.execute("SELECT count(*) FROM segments WHERE building = 1").fetchone()[0] == 1
    merger = index.segments.merger
    assert merger is not None
    stopping = threading.Thread(target=merger.close)  # the process ends in the middle of the merge
    stopping.start()
    pause.release.set()
    stopping.join(60)
    index.db.close()

    reopened = SqliteSearchIndex(path, fresh_rows=100, merge_chunk_rows=5)
    assert not reopened.rebuilt
    for query in QUERIES:  # the building segment is never read: nothing counted twice, nothing lost
        _same(_found(reopened, query, 10), _expected(everything, query, 10))
    assert reopened.segments.settle(60)  # the merger cleaned up and merged again
    assert reopened.db.execute("SELECT count(*) FROM segments WHERE building = 1").fetchone()[0] == 0
    orphans = "SELECT count(*) FROM postings WHERE seg NOT IN (SELECT seg FROM segments)"
    assert reopened.db.execute(orphans).fetchone()[0] == 0
    for query in QUERIES:
        _same(_found(reopened, query, 10), _expected(everything, query, 10))
    reopened.close()


def test_inline_merges_rank_alike(tmp_path: Path) -> None:
    index = SqliteSearchIndex(tmp_path / "index.sqlite3", fresh_rows=100, background_merges=False)
    everything = _fill(index, random.Random(4), FAN_IN + 1)
    assert index.segments.work_s["merge"] > 0 and index.segments.merger is None
    for query in QUERIES:
        _same(_found(index, query, 10), _expected(everything, query, 10))
    index.close()


def test_a_segment_written_while_a_cut_short_merge_is_cleaned_up_keeps_its_postings(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite3"
    pause = _Pause()
    index = SqliteSearchIndex(path, fresh_rows=100, merge_chunk_rows=5, on_merge_chunk=pause)
    rng = random.Random(8)
    everything: list[SearchDoc] = []
    while index.segments.counts()["segments"] < FAN_IN:  # no segment after the merge's: its number is the highest
        source = history_source(f"x:http:m{len(everything)}")
        docs = _docs(source, rng, 8)
        index.add(source, docs, "mark")
        everything += docs
    assert pause.paused.wait(60)
    merger = index.segments.merger
    assert merger is not None
    stopping = threading.Thread(target=merger.close)  # the process ends in the middle of the merge
    stopping.start()
    pause.release.set()
    stopping.join(60)
    index.db.close()

    cleaning = _Pause()  # holds the merger's clean-up of the building segment after its first chunk
    reopened = SqliteSearchIndex(path, fresh_rows=100, merge_chunk_rows=2, on_merge_chunk=cleaning)
    assert cleaning.paused.wait(60)
    try:
        written = reopened.segments.counts()["segments"]
        n = 0
        while reopened.segments.counts()["segments"] == written:  # a new segment is written meanwhile
            late = history_source(f"x:http:late{n}")
            more = _docs(late, rng, 8)
            reopened.add(late, more, f"mark-late{n}")
            everything += more
            n += 1
    finally:
        cleaning.release.set()
    assert reopened.segments.settle(60)
    for query in QUERIES:  # the new segment's postings were not taken for the cut-short merge's
        _same(_found(reopened, query, 10), _expected(everything, query, 10))
    orphans = "SELECT count(*) FROM postings WHERE seg NOT IN (SELECT seg FROM segments)"
    assert reopened.db.execute(orphans).fetchone()[0] == 0
    reopened.close()


def test_a_merge_gives_way_to_the_searches_under_way_and_still_finishes(tmp_path: Path) -> None:
    traffic = SearchTraffic()
    index = SqliteSearchIndex(tmp_path / "index.sqlite3", fresh_rows=100, merge_chunk_rows=5, traffic=traffic)
    merger = index.segments.merger
    assert merger is not None
    with traffic.searching():  # a search under way from before the merge to after its first waits
        everything = _fill(index, random.Random(5), FAN_IN + 1)
        deadline = time.monotonic() + 30
        while merger.waited == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert merger.waited > 0
    assert index.segments.settle(60)  # a merge waits a while at most: it ends whatever the searches
    assert index.segments.work_s["merge"] > 0
    for query in QUERIES:
        _same(_found(index, query, 10), _expected(everything, query, 10))
    index.close()


def test_search_traffic_is_quiet_once_every_search_ended() -> None:
    traffic = SearchTraffic()
    assert traffic.give_way(0) and not traffic.busy
    with traffic.searching(), traffic.searching():
        assert traffic.busy and not traffic.give_way(0.01)
    assert not traffic.busy
    entered, leave = threading.Event(), threading.Event()

    def search() -> None:
        with traffic.searching():
            entered.set()
            leave.wait(10)

    other = threading.Thread(target=search)
    other.start()
    assert entered.wait(10) and not traffic.give_way(0.01)
    leave.set()
    assert traffic.give_way(10)  # woken when the other thread's search ends
    other.join(10)
