"""The files index's postings, log-structured: fresh docs' terms, flushed into immutable segments, merged in tiers.

A new doc's terms are one row of `fresh` (its term counts, next to its `docs` row: a page or two per message, not a
page per term) and are kept in memory for searching. When `fresh_rows` postings wait, they are written as one
segment: a row per bucket of terms (`search_buckets`: the bucket's terms, their doc ids and tfs), keyed by segment
first, so the new rows land at the end of the b-tree, densely. Segments of about the same size (a tier) are merged
`FAN_IN` at a time into one, again appended at the end, so a posting is rewritten about once per tier (log of the
index size), never one page per term.
A deleted doc's postings stay in its segments until a merge drops them: a search only counts docs that are stored
(`DocColumns`). Everything is inside the index's transactions; the memory copy is rebuilt from the tables when one
rolls back or the index is reopened (after a crash the fresh docs are still in `fresh`: nothing is lost).
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from itertools import chain

import numpy as np

from agenthub.storage.search_buckets import (
    INSERT_ROW,
    bucket_of,
    merged,
    postings_count,
    postings_in,
    rows_of,
    seg_keys,
    segment_rows,
)
from agenthub.storage.search_merger import Merger
from agenthub.storage.search_topk import IDS, DocColumns, Ints

_SEP = "\x1f"
"""Between the terms of a `fresh` row (no term holds it: terms are runs of letters, digits and joiners)."""
FAN_IN = 16
"""Segments merged at a time (the segments of one tier): more means fewer rewrites of a posting, more segments to
look a term up in."""

TABLES = """
CREATE TABLE IF NOT EXISTS fresh(doc_id INTEGER PRIMARY KEY, terms TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS segments(
    seg INTEGER PRIMARY KEY, postings INTEGER NOT NULL, building INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS postings(
    key INTEGER PRIMARY KEY, terms TEXT NOT NULL, counts BLOB NOT NULL, docs BLOB NOT NULL, tfs BLOB NOT NULL,
    seg INTEGER GENERATED ALWAYS AS (key >> 16) VIRTUAL);
"""
"""`postings`: a row per (segment, bucket) that holds terms (`search_buckets`), keyed `seg * 2**16 + bucket`."""


class Segments:
    """The postings of one index (its connection, its worker thread)."""

    def __init__(self, db: sqlite3.Connection, fresh_rows: int, merger: Merger | None = None) -> None:
        self.db = db
        self.fresh_rows = fresh_rows
        self.merger = merger
        """Merges full tiers on its own thread (None: inline, in the transaction that wrote the segment)."""
        self._fresh: _Fresh | None = None  # memory copy of `fresh`
        self._pending: list[tuple[int, Sequence[str]]] = []  # docs added in this transaction, not in `fresh` yet
        self._flush_s = self._merge_s = 0.0
        self._written = False  # a segment was written in the current transaction

    @property
    def work_s(self) -> dict[str, float]:
        """Seconds spent writing and merging segments, here and on the merger (a statistic, for the benchmark)."""
        merged = self._merge_s + (self.merger.seconds if self.merger is not None else 0.0)
        return {"flush": self._flush_s, "merge": merged}

    def committed(self) -> None:
        """The transaction that wrote segments committed: the merger may look at the tiers."""
        if self._written and self.merger is not None:
            self.merger.wake()
        self._written = False

    def settle(self, timeout: float | None = None) -> bool:
        """Wait for the merges under way (none inline); False when `timeout` passed first."""
        return True if self.merger is None else self.merger.settle(timeout)

    def forget_memory(self) -> None:
        """The memory copy may be ahead of the tables (a rolled-back transaction): read it again when needed."""
        self._fresh = None
        self._pending = []

    def _memory(self) -> _Fresh:
        """The fresh postings, the docs added in this transaction included (their `fresh` rows written now)."""
        if self._fresh is None:
            fresh = _Fresh()
            rows = self.db.execute("SELECT doc_id, terms FROM fresh").fetchall()
            fresh.add([doc_id for doc_id, _ in rows], [Counter(terms.split(_SEP)) for _, terms in rows])
            self._fresh = fresh
        if self._pending:
            docs, self._pending = self._pending, []
            self.db.executemany("INSERT INTO fresh VALUES (?, ?)", [(i, _SEP.join(terms)) for i, terms in docs])
            self._fresh.add([doc_id for doc_id, _ in docs], [Counter(terms) for _, terms in docs])
        return self._fresh

    # ---- writing -------------------------------------------------------------------------------

    @property
    def pending(self) -> bool:
        """Docs were added in this transaction (`before_commit` writes their terms)."""
        return bool(self._pending)

    def add(self, docs: Sequence[tuple[int, Sequence[str]]]) -> None:
        """New docs' terms (inside the caller's transaction): gathered, and written by `before_commit` (a row each,
        all in one statement), or before anything reads them."""
        self._pending.extend(docs)

    def before_commit(self, columns: DocColumns) -> None:
        """The transaction's new docs' terms written; a segment when enough wait."""
        if self._memory().size >= self.fresh_rows:
            self.flush(columns)

    def drop(self, doc_ids: Sequence[int]) -> None:
        """Deleted docs: their fresh rows go (their text's terms are not kept); segments forget them in a merge (the
        memory copy keeps their postings until the next flush: a search never counts a doc that is not stored)."""
        if self._pending:
            gone = set(doc_ids)
            self._pending = [doc for doc in self._pending if doc[0] not in gone]
        self.db.execute("DELETE FROM fresh WHERE doc_id IN (SELECT value FROM json_each(?))", (json.dumps(doc_ids),))

    def flush(self, columns: DocColumns) -> None:
        """The fresh postings of stored docs become one segment, then tiers that are full are merged."""
        fresh = self._memory()
        if not fresh.size:
            return
        start = time.perf_counter()
        terms, docs, tfs = fresh.arrays()
        alive = columns.alive(docs)
        if not alive.all():
            terms, docs, tfs = terms[alive], docs[alive], tfs[alive]
        if len(docs):
            names = sorted(fresh.vocab)  # a row's terms in code point order
            rank = np.empty(len(names), np.int64)
            rank[[fresh.vocab[name] for name in names]] = np.arange(len(names))
            seg = self._new_segment(len(docs))
            self.db.executemany(INSERT_ROW, rows_of(seg, names, rank[terms], docs, tfs))
        self.db.execute("DELETE FROM fresh")
        self._fresh = _Fresh()
        self._flush_s += time.perf_counter() - start
        self._written = True
        if self.merger is None:
            self._merge_full_tiers(columns)

    def _new_segment(self, count: int) -> int:
        (seg,) = self.db.execute("INSERT INTO segments(postings) VALUES (?) RETURNING seg", (count,)).fetchone()
        return int(seg)

    def _merge_full_tiers(self, columns: DocColumns) -> None:
        while segs := self.full_tier(self.db):
            self.merge(segs, columns)

    def full_tier(self, db: sqlite3.Connection) -> list[int] | None:
        """The first `FAN_IN` segments of the first tier that has that many (None: no tier is full)."""
        tiers: dict[int, list[int]] = {}
        for seg, count in db.execute("SELECT seg, postings FROM segments WHERE building = 0 ORDER BY seg"):
            tiers.setdefault(self._tier(count), []).append(seg)
        full = [segs for segs in tiers.values() if len(segs) >= FAN_IN]
        return full[0][:FAN_IN] if full else None

    def _tier(self, count: int) -> int:
        return int(math.log(max(1.0, count / self.fresh_rows), FAN_IN))

    def merge(self, segs: Sequence[int], columns: DocColumns, *, drop_dead: bool = False) -> None:
        """These segments become one, appended at the end: a bucket in only one of them is copied as it is, a bucket
        in several gets its terms' postings joined. With `drop_dead` (a purge) the postings of docs no longer stored
        are left out, and so are terms only they held; otherwise those stay until then (a search never counts
        them)."""
        start = time.perf_counter()
        groups = list(segment_rows(self.db, segs))  # read before writing: the same connection
        seg = self._new_segment(0)
        rows = [merged(seg, bucket, parts, columns if drop_dead else None) for bucket, parts in groups]
        kept = [row for row in rows if row is not None]
        self.db.executemany(INSERT_ROW, kept)
        self.db.execute(
            "UPDATE segments SET postings = ? WHERE seg = ?", (sum(postings_count(row) for row in kept), seg)
        )
        listed = json.dumps(list(segs))
        for old in segs:
            self.db.execute("DELETE FROM postings WHERE key >= ? AND key < ?", seg_keys(old))
        self.db.execute("DELETE FROM segments WHERE seg IN (SELECT value FROM json_each(?))", (listed,))
        if not kept:
            self.db.execute("DELETE FROM segments WHERE seg = ?", (seg,))
        self._merge_s += time.perf_counter() - start

    def compact(self, columns: DocColumns) -> None:
        """Everything in one segment, without a posting (or a term) of a deleted doc: "forget me"."""
        self.flush(columns)
        self.db.execute("DELETE FROM segments WHERE building = 1")  # a merge cut short: its rows go too
        self.db.execute("DELETE FROM postings WHERE (key >> 16) NOT IN (SELECT seg FROM segments)")
        segs = [r[0] for r in self.db.execute("SELECT seg FROM segments")]
        if segs:
            self.merge(segs, columns, drop_dead=True)

    # ---- reading -------------------------------------------------------------------------------

    def read(self, terms: Sequence[str], columns: DocColumns) -> list[tuple[str, Ints, Ints]]:
        """Each query term's postings, (term, doc ids, tfs), in query order; terms in no segment and no fresh doc are
        left out. Ids of docs deleted since are still there (a search does not count them: `DocColumns.source`)."""
        fresh = self._memory()
        parts: dict[str, tuple[list[Ints], list[Ints]]] = {}
        buckets = sorted({bucket_of(term) for term in terms})
        rows = self.db.execute(
            "SELECT p.key, p.terms, p.counts, p.docs, p.tfs FROM segments s CROSS JOIN json_each(?) b "
            "CROSS JOIN postings p ON p.key = s.seg * 65536 + b.value WHERE s.building = 0 ORDER BY s.seg",
            (json.dumps(buckets),),
        )
        for row in rows:
            for term, docs, tfs in postings_in(row, terms):
                both = parts.setdefault(term, ([], []))
                both[0].append(docs)
                both[1].append(tfs)
        found: list[tuple[str, Ints, Ints]] = []
        for term in terms:
            docs_parts, tfs_parts = parts.get(term, ([], []))
            waiting = fresh.postings(term)
            if waiting is not None:
                docs_parts.append(waiting[0])
                tfs_parts.append(waiting[1])
            if not docs_parts:
                continue
            found.append((term, _concatenated(docs_parts), _concatenated(tfs_parts)))
        return found

    def counts(self) -> dict[str, int]:
        segs, postings = self.db.execute(
            "SELECT count(*), coalesce(sum(postings), 0) FROM segments WHERE building = 0"
        ).fetchone()
        return {"segments": int(segs), "segment_postings": int(postings), "fresh_postings": self._memory().size}


class _Fresh:
    """The postings waiting in `fresh`, in memory: three growing arrays (term number, doc id, tf), a posting per
    distinct term of a doc, in the order added, and the terms' numbers (`vocab`)."""

    def __init__(self) -> None:
        self.vocab: defaultdict[str, int] = defaultdict()
        self.vocab.default_factory = self.vocab.__len__  # a new term gets the next number, inside one C call
        self.size = 0
        self._terms = np.zeros(1024, np.int32)
        self._docs = np.zeros(1024, np.int32)
        self._tfs = np.zeros(1024, np.int32)

    def add(self, doc_ids: Sequence[int], counts: Sequence[Counter[str]]) -> None:
        """Each doc's term counts (`doc_ids[i]`'s are `counts[i]`)."""
        numbers = np.fromiter(map(self.vocab.__getitem__, chain.from_iterable(counts)), np.int32)
        n = len(numbers)
        end = self.size + n
        if end > len(self._terms):
            self._grow(end)
        self._terms[self.size : end] = numbers
        self._docs[self.size : end] = np.repeat(np.array(doc_ids, np.int32), [len(c) for c in counts])
        self._tfs[self.size : end] = np.fromiter(chain.from_iterable(c.values() for c in counts), np.int32, n)
        self.size = end

    def _grow(self, need: int) -> None:
        size = max(need, 2 * len(self._terms))
        for name in ("_terms", "_docs", "_tfs"):
            old = getattr(self, name)
            new = np.zeros(size, np.int32)
            new[: self.size] = old[: self.size]
            setattr(self, name, new)

    def arrays(self) -> tuple[Ints, Ints, Ints]:
        return self._terms[: self.size], self._docs[: self.size], self._tfs[: self.size]

    def postings(self, term: str) -> tuple[Ints, Ints] | None:
        """The term's waiting (doc ids, tfs) as `IDS`, in the order added; None when it has none."""
        number = self.vocab.get(term)
        if number is None:
            return None
        where = np.flatnonzero(self._terms[: self.size] == number)
        return self._docs[where].astype(IDS), self._tfs[where].astype(IDS)


def _concatenated(parts: Iterable[Ints]) -> Ints:
    listed = list(parts)
    return listed[0] if len(listed) == 1 else np.concatenate(listed)
