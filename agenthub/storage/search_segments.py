"""The files index's postings, log-structured: fresh docs' terms, flushed into immutable segments, merged in tiers.

A new doc's terms are one row of `fresh` (its term counts, next to its `docs` row: a page or two per message, not a
page per term) and are kept in memory for searching. When `fresh_rows` postings wait, they are written as one
segment: a row per term (`postings`: segment, term, doc ids, tfs), keyed by segment first, so the new rows land at the
end of the b-tree, densely. Segments of about the same size (a tier) are merged `FAN_IN` at a time into one, again
appended at the end, so a posting is rewritten about once per tier (log of the index size), never one page per term.
A deleted doc's postings stay in its segments until a merge drops them: a search only counts docs that are stored
(`DocColumns`). Everything is inside the index's transactions; the memory copy is rebuilt from the tables when one
rolls back or the index is reopened (after a crash the fresh docs are still in `fresh`: nothing is lost).
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import chain

import numpy as np

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
    seg INTEGER NOT NULL, term TEXT NOT NULL, docs BLOB NOT NULL, tfs BLOB NOT NULL, PRIMARY KEY(seg, term))
    WITHOUT ROWID;
"""


class Segments:
    """The postings of one index (its connection, its worker thread)."""

    def __init__(self, db: sqlite3.Connection, fresh_rows: int, merger: Merger | None = None) -> None:
        self.db = db
        self.fresh_rows = fresh_rows
        self.merger = merger
        """Merges full tiers on its own thread (None: inline, in the transaction that wrote the segment)."""
        self._fresh: _Fresh | None = None  # memory copy of `fresh`
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

    def _memory(self) -> _Fresh:
        if self._fresh is None:
            fresh = _Fresh()
            rows = self.db.execute("SELECT doc_id, terms FROM fresh").fetchall()
            fresh.add([doc_id for doc_id, _ in rows], [Counter(terms.split(_SEP)) for _, terms in rows])
            self._fresh = fresh
        return self._fresh

    # ---- writing -------------------------------------------------------------------------------

    def add(self, docs: Sequence[tuple[int, Sequence[str]]], columns: DocColumns) -> None:
        """New docs' terms (inside the caller's transaction); a segment is written when enough wait."""
        fresh = self._memory()
        self.db.executemany("INSERT INTO fresh VALUES (?, ?)", [(doc_id, _SEP.join(terms)) for doc_id, terms in docs])
        fresh.add([doc_id for doc_id, _ in docs], [Counter(terms) for _, terms in docs])
        if fresh.size >= self.fresh_rows:
            self.flush(columns)

    def drop(self, doc_ids: Sequence[int]) -> None:
        """Deleted docs: their fresh rows go (their text's terms are not kept); segments forget them in a merge (the
        memory copy keeps their postings until the next flush: a search never counts a doc that is not stored)."""
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
            names = sorted(fresh.vocab)  # the b-tree's order: a term's UTF-8 bytes, which is its code points' order
            rank = np.empty(len(names), np.int64)
            rank[[fresh.vocab[name] for name in names]] = np.arange(len(names))
            key = rank[terms]
            order = np.argsort(key, kind="stable")  # stable: each term's doc ids stay ascending, as they were added
            key, docs, tfs = key[order], docs[order], tfs[order]
            starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
            bounds = (np.append(starts, len(key)) * IDS.itemsize).tolist()
            doc_bytes, tf_bytes = docs.astype(IDS).tobytes(), tfs.astype(IDS).tobytes()
            rows = (
                (names[k], doc_bytes[a:b], tf_bytes[a:b])
                for k, a, b in zip(key[starts].tolist(), bounds, bounds[1:], strict=False)
            )
            self._write(len(docs), rows)
        self.db.execute("DELETE FROM fresh")
        self._fresh = _Fresh()
        self._flush_s += time.perf_counter() - start
        self._written = True
        if self.merger is None:
            self._merge_full_tiers(columns)

    def _write(self, count: int, rows: Iterable[tuple[str, bytes, bytes]]) -> None:
        """A new segment of `count` postings: `rows` (term, doc ids, tfs), in term order."""
        (seg,) = self.db.execute("INSERT INTO segments(postings) VALUES (?) RETURNING seg", (count,)).fetchone()
        self.db.executemany("INSERT INTO postings VALUES (?, ?, ?, ?)", ((seg, *row) for row in rows))

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
        """These segments become one, appended at the end: a term in only one of them is copied as it is (inside
        SQLite), a term in several gets its postings joined. With `drop_dead` (a purge) the postings of docs no longer
        stored are left out, and so are terms only they held; otherwise those stay until then (a search never counts
        them)."""
        start = time.perf_counter()
        listed = json.dumps(list(segs))
        within = "seg IN (SELECT value FROM json_each(?))"
        if drop_dead:
            rows = self._joined(f"SELECT term, docs, tfs FROM postings WHERE {within}", listed, columns)
            self._drop_segments(within, listed)
            if rows:
                count = sum(len(docs) for docs, _ in rows.values()) // IDS.itemsize
                self._write(count, ((term, *rows[term]) for term in sorted(rows)))
        else:
            self.db.execute("CREATE TEMP TABLE IF NOT EXISTS shared(term TEXT PRIMARY KEY) WITHOUT ROWID")
            self.db.execute("DELETE FROM temp.shared")
            self.db.execute(
                f"INSERT INTO temp.shared SELECT term FROM postings WHERE {within} GROUP BY term HAVING count(*) > 1",
                (listed,),
            )
            rows = self._joined(
                f"SELECT term, docs, tfs FROM postings WHERE {within} AND term IN (SELECT term FROM temp.shared)",
                listed,
                None,
            )
            (count,) = self.db.execute(f"SELECT sum(postings) FROM segments WHERE {within}", (listed,)).fetchone()
            (seg,) = self.db.execute("INSERT INTO segments(postings) VALUES (?) RETURNING seg", (count,)).fetchone()
            self.db.execute(
                f"INSERT INTO postings SELECT ?, term, docs, tfs FROM postings WHERE {within} "
                "AND term NOT IN (SELECT term FROM temp.shared) ORDER BY term",
                (seg, listed),
            )
            self.db.executemany("INSERT INTO postings VALUES (?, ?, ?, ?)", ((seg, t, *rows[t]) for t in sorted(rows)))
            self.db.execute("DELETE FROM temp.shared")
            self._drop_segments(within, listed)
        self._merge_s += time.perf_counter() - start

    def _drop_segments(self, within: str, listed: str) -> None:
        self.db.execute(f"DELETE FROM postings WHERE {within}", (listed,))
        self.db.execute(f"DELETE FROM segments WHERE {within}", (listed,))

    def _joined(self, sql: str, listed: str, columns: DocColumns | None) -> dict[str, tuple[bytes, bytes]]:
        """Each term's postings of the rows `sql` reads, joined; with `columns`, of stored docs only."""
        parts: dict[str, tuple[list[bytes], list[bytes]]] = {}
        for term, docs, tfs in self.db.execute(sql, (listed,)):
            both = parts.setdefault(term, ([], []))
            both[0].append(docs)
            both[1].append(tfs)
        rows: dict[str, tuple[bytes, bytes]] = {}
        for term, (docs, tfs) in parts.items():
            ids, counts = b"".join(docs), b"".join(tfs)
            if columns is not None:
                array = np.frombuffer(ids, IDS)
                alive = columns.alive(array)
                if not alive.any():
                    continue
                if not alive.all():
                    ids, counts = array[alive].tobytes(), np.frombuffer(counts, IDS)[alive].tobytes()
            rows[term] = (ids, counts)
        return rows

    def compact(self, columns: DocColumns) -> None:
        """Everything in one segment, without a posting (or a term) of a deleted doc: "forget me"."""
        self.flush(columns)
        self.db.execute("DELETE FROM segments WHERE building = 1")  # a merge cut short: its rows go too
        self.db.execute("DELETE FROM postings WHERE seg NOT IN (SELECT seg FROM segments)")
        segs = [r[0] for r in self.db.execute("SELECT seg FROM segments")]
        if segs:
            self.merge(segs, columns, drop_dead=True)

    # ---- reading -------------------------------------------------------------------------------

    def read(self, terms: Sequence[str], columns: DocColumns) -> list[tuple[str, Ints, Ints]]:
        """Each query term's postings, (term, doc ids, tfs), in query order; terms in no segment and no fresh doc are
        left out. Ids of docs deleted since are still there (a search does not count them: `DocColumns.source`)."""
        fresh = self._memory()
        parts: dict[str, tuple[list[Ints], list[Ints]]] = {}
        for term, docs, tfs in self.db.execute(
            "SELECT term, docs, tfs FROM postings WHERE seg IN (SELECT seg FROM segments WHERE building = 0) "
            "AND term IN (SELECT value FROM json_each(?))",
            (json.dumps(list(terms)),),
        ):
            both = parts.setdefault(term, ([], []))
            both[0].append(np.frombuffer(docs, IDS))
            both[1].append(np.frombuffer(tfs, IDS))
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
        self.vocab: dict[str, int] = {}
        self.size = 0
        self._terms = np.zeros(1024, np.int32)
        self._docs = np.zeros(1024, np.int32)
        self._tfs = np.zeros(1024, np.int32)

    def add(self, doc_ids: Sequence[int], counts: Sequence[Counter[str]]) -> None:
        """Each doc's term counts (`doc_ids[i]`'s are `counts[i]`)."""
        vocab = self.vocab
        numbers = [vocab.setdefault(term, len(vocab)) for term in chain.from_iterable(counts)]
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
