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
import sys
import time
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from agenthub.storage.search_topk import IDS, DocColumns, Ints

_SEP = "\x1f"
"""Between the terms of a `fresh` row (no term holds it: terms are runs of letters, digits and joiners)."""
FAN_IN = 16
"""Segments merged at a time (the segments of one tier): more means fewer rewrites of a posting, more segments to
look a term up in."""

TABLES = """
CREATE TABLE IF NOT EXISTS fresh(doc_id INTEGER PRIMARY KEY, terms TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS segments(seg INTEGER PRIMARY KEY, postings INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS postings(
    seg INTEGER NOT NULL, term TEXT NOT NULL, docs BLOB NOT NULL, tfs BLOB NOT NULL, PRIMARY KEY(seg, term))
    WITHOUT ROWID;
"""


class Segments:
    """The postings of one index (its connection, its worker thread)."""

    def __init__(self, db: sqlite3.Connection, fresh_rows: int) -> None:
        self.db = db
        self.fresh_rows = fresh_rows
        self._fresh: dict[str, tuple[list[int], list[int]]] | None = None  # memory copy of `fresh`, by term
        self._waiting = 0  # postings in `fresh`
        self._dropped: set[int] = set()  # fresh docs deleted since they were added
        self.work_s = {"flush": 0.0, "merge": 0.0}
        """Seconds spent writing and merging segments (a statistic, for the benchmark)."""

    def forget_memory(self) -> None:
        """The memory copy may be ahead of the tables (a rolled-back transaction): read it again when needed."""
        self._fresh = None

    def _memory(self) -> dict[str, tuple[list[int], list[int]]]:
        if self._fresh is None:
            self._fresh, self._waiting, self._dropped = {}, 0, set()
            for doc_id, terms in self.db.execute("SELECT doc_id, terms FROM fresh"):
                self._remember(doc_id, Counter(terms.split(_SEP)))
        return self._fresh

    def _remember(self, doc_id: int, counts: Counter[str]) -> None:
        fresh = self._fresh
        assert fresh is not None
        for term, tf in counts.items():
            docs, tfs = fresh.setdefault(term, ([], []))
            docs.append(doc_id)
            tfs.append(tf)
        self._waiting += len(counts)

    # ---- writing -------------------------------------------------------------------------------

    def add(self, docs: Sequence[tuple[int, Sequence[str]]], columns: DocColumns) -> None:
        """New docs' terms (inside the caller's transaction); a segment is written when enough wait."""
        self._memory()
        self.db.executemany("INSERT INTO fresh VALUES (?, ?)", [(doc_id, _SEP.join(terms)) for doc_id, terms in docs])
        for doc_id, terms in docs:
            self._remember(doc_id, Counter(terms))
        if self._waiting >= self.fresh_rows:
            self.flush(columns)

    def drop(self, doc_ids: Sequence[int]) -> None:
        """Deleted docs: their fresh rows go (their text's terms are not kept); segments forget them in a merge."""
        self._memory()
        self._dropped.update(doc_ids)
        self.db.execute("DELETE FROM fresh WHERE doc_id IN (SELECT value FROM json_each(?))", (json.dumps(doc_ids),))

    def flush(self, columns: DocColumns) -> None:
        """The fresh postings of stored docs become one segment, then tiers that are full are merged."""
        fresh = self._memory()
        if not fresh:
            return
        start = time.perf_counter()
        rows: dict[str, tuple[bytes, bytes]] = {}
        gone = self._dropped
        for term, (docs, tfs) in fresh.items():
            if gone and not gone.isdisjoint(docs):
                kept = [(d, tf) for d, tf in zip(docs, tfs, strict=True) if d not in gone]
                if not kept:
                    continue
                docs, tfs = [d for d, _ in kept], [tf for _, tf in kept]
            if len(docs) == 1:
                rows[term] = (_int32(docs[0]), _int32(tfs[0]))
            else:
                rows[term] = (_packed(docs), _packed(tfs))
        self._write(rows)
        self.db.execute("DELETE FROM fresh")
        self._fresh, self._waiting, self._dropped = {}, 0, set()
        self.work_s["flush"] += time.perf_counter() - start
        self._merge_full_tiers(columns)

    def _write(self, rows: dict[str, tuple[bytes, bytes]]) -> None:
        if not rows:
            return
        count = sum(len(docs) for docs, _ in rows.values()) // IDS.itemsize
        (seg,) = self.db.execute("INSERT INTO segments(postings) VALUES (?) RETURNING seg", (count,)).fetchone()
        self.db.executemany(
            "INSERT INTO postings VALUES (?, ?, ?, ?)", ((seg, term, *rows[term]) for term in sorted(rows))
        )

    def _merge_full_tiers(self, columns: DocColumns) -> None:
        while True:
            tiers: dict[int, list[int]] = {}
            for seg, count in self.db.execute("SELECT seg, postings FROM segments ORDER BY seg"):
                tiers.setdefault(self._tier(count), []).append(seg)
            full = [segs for segs in tiers.values() if len(segs) >= FAN_IN]
            if not full:
                return
            self.merge(full[0][:FAN_IN], columns)

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
            self._write(rows)
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
        self.work_s["merge"] += time.perf_counter() - start

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
            "SELECT term, docs, tfs FROM postings WHERE seg IN (SELECT seg FROM segments) "
            "AND term IN (SELECT value FROM json_each(?))",
            (json.dumps(list(terms)),),
        ):
            both = parts.setdefault(term, ([], []))
            both[0].append(np.frombuffer(docs, IDS))
            both[1].append(np.frombuffer(tfs, IDS))
        found: list[tuple[str, Ints, Ints]] = []
        for term in terms:
            docs_parts, tfs_parts = parts.get(term, ([], []))
            if term in fresh:
                docs_parts.append(np.array(fresh[term][0], IDS))
                tfs_parts.append(np.array(fresh[term][1], IDS))
            if not docs_parts:
                continue
            found.append((term, _concatenated(docs_parts), _concatenated(tfs_parts)))
        return found

    def counts(self) -> dict[str, int]:
        segs, postings = self.db.execute("SELECT count(*), coalesce(sum(postings), 0) FROM segments").fetchone()
        self._memory()
        return {"segments": int(segs), "segment_postings": int(postings), "fresh_postings": self._waiting}


def _int32(value: int) -> bytes:
    return value.to_bytes(4, "little", signed=True)


def _packed(values: list[int]) -> bytes:
    """Little-endian int32s (`IDS`)."""
    packed = array("i", values)
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


def _concatenated(parts: Iterable[Ints]) -> Ints:
    listed = list(parts)
    return listed[0] if len(listed) == 1 else np.concatenate(listed)
