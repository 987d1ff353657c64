"""Merges the files index's segments on a thread and connections of their own, so a search never waits behind one.

SQLite in WAL mode lets readers read while one writer writes; the index worker both writes (appends) and reads
(searches) on its one thread, so a merge holding the write lock for long would stall the searches queued behind
the next append. A merge here therefore reads its segments (immutable) on a reading connection and writes the new
segment in short transactions of `chunk_rows` rows on a writing one: between two, the worker's writes go through.
The new segment is `building` (no search reads it) until one short transaction makes it live and takes the merged
segments out of `segments` (a search statement sees either the old segments or the new one, never both); their
postings are then deleted, again in short transactions. A crash leaves a building segment or postings of no live
segment: both are removed when the merger next starts, and nothing searchable is lost (the old segments stay
live until the swap).
A merge gives way to searches (`SearchTraffic`): while one is under way on the index's store, the merger waits
between two buckets (up to `GIVE_WAY_S`, then works a `SLICE_S` slice before looking again, so a steady stream of
searches slows a merge down but never stops it), and its thread runs at a lower CPU priority: on two cores a
merge's Python work would otherwise take the interpreter lock from the search half the time.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import structlog

from agenthub.storage.search_buckets import INSERT_ROW, Row, merged, postings_count, seg_keys, seg_of, segment_rows
from agenthub.storage.search_traffic import SearchTraffic

log = structlog.get_logger(__name__)

CHUNK_ROWS = 256
"""Postings rows (buckets of a segment) written (or deleted) per write transaction of a merge: the longest a
worker's write waits."""
BUSY_MS = 60_000
GIVE_WAY_S = 0.05
"""Longest a merge waits, between two buckets, for the searches under way to end."""
SLICE_S = 0.005
"""Merge work done without looking at the searches again once a wait for them ran out (a merge always progresses)."""
NICENESS = 10
"""How much lower the merger thread's CPU priority is than the process's (Linux: a thread has its own)."""

Plan = Callable[[sqlite3.Connection], Sequence[int] | None]


class Merger:
    """One index's background merges: `wake()` after a commit that wrote a segment; `plan(db)` names the segments to
    merge next (None: nothing to do). `on_chunk` is called after each committed write transaction (a statistic or a
    test's pause)."""

    def __init__(
        self,
        path: Path,
        plan: Plan,
        *,
        chunk_rows: int = CHUNK_ROWS,
        on_chunk: Callable[[], None] | None = None,
        traffic: SearchTraffic | None = None,
        niceness: int = NICENESS,
    ) -> None:
        self.path = path
        self.plan = plan
        self.chunk_rows = chunk_rows
        self.on_chunk = on_chunk
        self.traffic = traffic
        self.niceness = niceness
        """The searches a merge gives way to (None: it never waits for them)."""
        self.waited = 0.0
        """Seconds the merges waited for searches (a statistic)."""
        self._slice_end = 0.0
        self.lock = threading.Lock()
        """Held while a merge runs: whoever rewrites the segments otherwise (a purge) takes it first."""
        self.merging = threading.Event()
        """Set while a merge is in progress (between its first read and its swap)."""
        self.seconds = 0.0
        """CPU seconds the merger's thread spent merging (a statistic; its thread's time, so the time it waits for
        the interpreter lock while the index's thread works is not counted twice)."""
        self._wanted = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._stop = False
        self._thread: threading.Thread | None = None

    def wake(self) -> None:
        """New segments were committed: merge what is full (on the merger's thread)."""
        if self._stop:
            return
        self._idle.clear()
        self._wanted.set()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"search-merge-{self.path.parent.name}", daemon=True)
            self._thread.start()

    def settle(self, timeout: float | None = None) -> bool:
        """Wait until no merge is wanted or running; False when `timeout` passed first."""
        return self._idle.wait(timeout)

    def close(self) -> None:
        """Stop after the current write transaction (a merge cut short is cleaned up at the next start)."""
        self._stop = True
        self._wanted.set()
        thread = self._thread
        if thread is not None:
            thread.join()
        self._thread = None

    # ---- the thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        _lower_priority(self.niceness)
        try:
            reader, writer = self._connect(), self._connect()
        except sqlite3.Error:
            log.exception("search_merge_failed")
            self._thread = None
            self._idle.set()
            return
        try:
            self._clean(writer)
            while not self._stop:
                self._wanted.wait()
                self._wanted.clear()
                while not self._stop and self._merge_next(reader, writer):
                    pass
                if not self._wanted.is_set():
                    self._idle.set()
        except sqlite3.Error:  # locked too long, or damaged (the worker finds that too, and rebuilds)
            log.exception("search_merge_failed")
        finally:
            self.merging.clear()
            reader.close()
            writer.close()
            self._thread = None  # the next wake starts again: new connections, the clean-up first
            self._idle.set()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_MS / 1000)
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA secure_delete=ON")
        return db

    def _merge_next(self, reader: sqlite3.Connection, writer: sqlite3.Connection) -> bool:
        with self.lock:
            segs = self.plan(reader)
            if not segs:
                return False
            self.merging.set()
            start = time.thread_time()
            try:
                done = self._merge(reader, writer, segs)
            finally:
                self.seconds += time.thread_time() - start
                self.merging.clear()
            return done

    def _merge(self, reader: sqlite3.Connection, writer: sqlite3.Connection, segs: Sequence[int]) -> bool:
        with _write(writer):
            (seg,) = writer.execute("INSERT INTO segments(postings, building) VALUES (0, 1) RETURNING seg").fetchone()
        count = 0
        reader.execute("BEGIN")  # one snapshot of the old segments (immutable: only this merge drops them)
        try:
            rows = self._paced(merged(seg, bucket, parts, None) for bucket, parts in segment_rows(reader, segs))
            while chunk := [row for row in _take(rows, self.chunk_rows) if row is not None]:
                if self._stop:
                    return False
                self._give_way()
                with _write(writer):
                    writer.executemany(INSERT_ROW, chunk)
                count += sum(postings_count(row) for row in chunk)
                self._chunk_done()
        finally:
            reader.execute("COMMIT")
        listed = ",".join(str(int(s)) for s in segs)
        with _write(writer):  # the swap: the new segment live, the merged ones gone, in one step
            writer.execute("UPDATE segments SET building = 0, postings = ? WHERE seg = ?", (count, seg))
            writer.execute(f"DELETE FROM segments WHERE seg IN ({listed})")
        for old in segs:
            self._delete_postings(writer, old)
        return True

    def _delete_postings(self, writer: sqlite3.Connection, seg: int) -> None:
        low, high = seg_keys(seg)
        while not self._stop:
            self._give_way()
            with _write(writer):
                deleted = writer.execute(
                    "DELETE FROM postings WHERE key IN "
                    "(SELECT key FROM postings WHERE key >= ? AND key < ? ORDER BY key LIMIT ?)",
                    (low, high, self.chunk_rows),
                ).rowcount
            self._chunk_done()
            if deleted < self.chunk_rows:
                return

    def _paced(self, rows: Iterable[Row | None]) -> Iterator[Row | None]:
        for row in rows:
            self._give_way()
            yield row

    def _give_way(self) -> None:
        """Wait while searches are under way (`SearchTraffic`), unless a wait ran out less than `SLICE_S` ago."""
        traffic = self.traffic
        if traffic is None or not traffic.busy or time.monotonic() < self._slice_end:
            return
        start = time.monotonic()
        if not traffic.give_way(GIVE_WAY_S):
            self._slice_end = time.monotonic() + SLICE_S
        self.waited += time.monotonic() - start

    def _chunk_done(self) -> None:
        if self.on_chunk is not None:
            self.on_chunk()

    def _clean(self, writer: sqlite3.Connection) -> None:
        """What a merge cut short left: building segments and postings of no live segment. Their numbers stay taken
        (a `building` row) until their postings are gone: a segment the index writes meanwhile gets a new number,
        so its postings are neither mixed with those nor deleted with them."""
        with self.lock:  # a purge compacts meanwhile: it waits
            with _write(writer):
                for seg in list(_posting_segments(writer)):
                    writer.execute("INSERT OR IGNORE INTO segments(seg, postings, building) VALUES (?, 0, 1)", (seg,))
            for (seg,) in writer.execute("SELECT seg FROM segments WHERE building = 1").fetchall():
                self._delete_postings(writer, seg)
                if self._stop:
                    return
                with _write(writer):
                    writer.execute("DELETE FROM segments WHERE seg = ?", (seg,))


def _lower_priority(niceness: int) -> None:
    """The calling thread's CPU priority lowered by `niceness` (Linux only: elsewhere a priority is the process's)."""
    if sys.platform != "linux" or niceness <= 0:
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + niceness))
    except OSError:
        log.info("search_merge_priority_unchanged")


@contextmanager
def _write(db: sqlite3.Connection) -> Iterator[None]:
    """One short write transaction (IMMEDIATE: the write lock first, waiting for it up to the busy timeout)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _take(rows: Iterator[Row | None], n: int) -> list[Row | None]:
    return [row for _, row in zip(range(n), rows, strict=False)]


def _posting_segments(db: sqlite3.Connection) -> Iterator[int]:
    """Every segment number in `postings` (a skip along the key: one lookup per segment)."""
    row = db.execute("SELECT min(key) FROM postings").fetchone()
    key = row[0] if row else None
    while key is not None:
        seg = seg_of(key)
        yield seg
        key = db.execute("SELECT min(key) FROM postings WHERE key >= ?", (seg_keys(seg)[1],)).fetchone()[0]
