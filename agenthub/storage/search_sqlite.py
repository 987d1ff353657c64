"""One agent's search index in SQLite (`data/<agent>/index/search.sqlite3`): docs, postings and BM25 ranking.

Blocking, used from one thread (the files backend's worker). Ranks exactly as `agenthub.storage.search_index`
says: the postings are log-structured segments (`search_segments`: storing a message writes its doc row and one
row of its term counts, never a page per term) and a search scores every posting of the query's terms with numpy
(`search_topk`). The database is derived data: damaged, missing or of another schema version it is removed and
recreated empty, and the indexer catches up from the files by their watermarks (none: everything), so no turn is
lost.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from agenthub.storage.search_index import (
    MEMORY,
    Passage,
    SearchDoc,
    SearchHit,
    SearchScope,
    SourceRef,
    identity,
    rank_key,
    session_channel,
)
from agenthub.storage.search_merger import BUSY_MS, CHUNK_ROWS, Merger
from agenthub.storage.search_segments import TABLES, Segments
from agenthub.storage.search_topk import DocColumns, Ranking, best_docs
from agenthub.storage.search_traffic import SearchTraffic

log = structlog.get_logger(__name__)

SCHEMA_VERSION = "10"
"""7: postings in segments (log-structured, `search_segments`), scored vectorised (an index of another version is
rebuilt from the files). 8: segments being merged (`building`) are written beside the live ones by the merger's
own thread (`search_merger`). 9: a segment's postings packed per bucket of hashed terms. 10: the same tables; docs
indexed before search docs were made storable (`storage.storable`) held a NUL, now U+FFFD as the vectors' copy."""
FRESH_ROWS = 256_000
"""New postings wait in `fresh` (a row per message) until this many have gathered, then become one segment. Larger
segments hold fewer rows per posting (a term's postings of many messages are one row; at 64,000 the bench wrote
0.44 rows per posting, at 256,000 0.16) and reach the merge tiers later; a search scans the waiting ones in memory
(a compare over one int32 array per query term)."""

_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS settings(name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS totals(id INTEGER PRIMARY KEY CHECK (id = 1), docs INTEGER NOT NULL, terms INTEGER NOT NULL);
INSERT OR IGNORE INTO totals VALUES (1, 0, 0);
CREATE TABLE IF NOT EXISTS sources(
    id INTEGER PRIMARY KEY, kind TEXT NOT NULL, session TEXT NOT NULL, name TEXT NOT NULL,
    watermark TEXT NOT NULL, UNIQUE(kind, session, name));
CREATE INDEX IF NOT EXISTS sources_session ON sources(session);
CREATE TABLE IF NOT EXISTS docs(
    id INTEGER PRIMARY KEY AUTOINCREMENT, source_id INTEGER NOT NULL, seq INTEGER NOT NULL, role TEXT NOT NULL,
    speaker TEXT, ts INTEGER, dl INTEGER NOT NULL, text TEXT NOT NULL, UNIQUE(source_id, seq));
CREATE INDEX IF NOT EXISTS docs_ts ON docs(ts);
"""
    + TABLES
)
"""Doc ids are never reused (AUTOINCREMENT): a deleted doc's id left in a segment can never name another doc."""

_DOC = "d.id, d.source_id, d.seq, d.role, d.speaker, d.ts, d.text"


class SqliteSearchIndex:
    """The index of one agent; use it from one thread only."""

    def __init__(
        self,
        path: Path,
        agent: str = "",
        *,
        fresh_rows: int = FRESH_ROWS,
        background_merges: bool = True,
        merge_chunk_rows: int = CHUNK_ROWS,
        on_merge_chunk: Callable[[], None] | None = None,
        traffic: SearchTraffic | None = None,
    ) -> None:
        """`background_merges`: full tiers are merged by a `Merger` (own thread and connections, `merge_chunk_rows`
        rows per write transaction, `on_merge_chunk` called after each, giving way to the searches `traffic` counts:
        this index's, and those of the other indexes sharing it); False: inline, in the writing transaction."""
        self.path = path
        self.traffic = traffic or SearchTraffic()
        self.agent = agent
        self.fresh_rows = fresh_rows
        self.rebuilt = False
        """True when the database had to be created anew (damaged, missing or of another schema)."""
        self.db = self._open()
        self._sources: dict[int, SourceRef] | None = None  # cache of the sources table
        self._grouped: _Grouped = ({}, {}, {})  # its ids by memory name, by session, by channel
        merger = Merger(path, self._plan, chunk_rows=merge_chunk_rows, on_chunk=on_merge_chunk, traffic=self.traffic)
        self.segments = Segments(self.db, fresh_rows, merger if background_merges else None)
        if background_merges:
            merger.wake()  # what a crash left, and tiers full since: on the merger's thread
        self._columns: DocColumns | None = None  # each doc's source, length and ts, read once
        self._marks: dict[SourceRef, str] | None = None  # the sources' watermarks, read once
        self._ids: dict[SourceRef, int] = {}  # the ids of sources this index wrote (cleared with `_sources`)
        self._moved: dict[int, str] = {}  # watermarks moved in the transaction under way, written at its commit
        self._next_doc: int | None = None  # the next doc id
        self._totals = (0, 0)  # what the transaction under way adds to N and the total length

    # ---- opening -------------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        existed = self.path.exists()
        try:
            return self._connect()
        except sqlite3.DatabaseError:  # corrupt or from another schema: derived data, start again
            log.warning("search_index_rebuilt", agent=self.agent)
            remove_index_files(self.path)
            self.rebuilt = True
            return self._connect()
        finally:
            self.rebuilt = self.rebuilt or not existed

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_MS / 1000)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA wal_autocheckpoint=10000")  # fewer, larger checkpoints: hot pages copied once
            db.execute("PRAGMA cache_size=-65536")  # 64 MiB: the postings' upper levels stay in memory
            db.execute("PRAGMA secure_delete=ON")  # freed pages are zeroed: deleted text does not linger
            db.executescript(_SCHEMA)
            row = db.execute("SELECT value FROM settings WHERE name = 'schema'").fetchone()
            if row is None:
                db.execute("INSERT INTO settings VALUES ('schema', ?)", (SCHEMA_VERSION,))
            elif row[0] != SCHEMA_VERSION:
                raise sqlite3.DatabaseError("search index schema changed")
        except BaseException:
            db.close()
            raise
        return db

    def _plan(self, db: sqlite3.Connection) -> list[int] | None:
        return self.segments.full_tier(db)

    def close(self) -> None:
        if self.segments.merger is not None:
            self.segments.merger.close()
        self.db.close()

    # ---- writing -------------------------------------------------------------------------------

    def watermarks(self) -> dict[SourceRef, str]:
        return dict(self._watermarks())

    def _watermarks(self) -> dict[SourceRef, str]:
        """Every source's watermark, read once and then kept as this index writes them (its thread is the only
        writer of `sources`)."""
        if self._marks is None:
            rows = self.db.execute("SELECT kind, session, name, watermark FROM sources").fetchall()
            self._marks = {SourceRef(k, s, n): w for k, s, n, w in rows}
        return self._marks

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One atomic write; inside another one (a batch of sessions), part of it."""
        if self.db.in_transaction:
            yield
            return
        self.db.execute("BEGIN IMMEDIATE")  # the write lock first: a merge committing meanwhile is waited for
        try:
            yield
            if self.segments.pending:
                self.segments.before_commit(self.columns())
            self._write_moved()
            docs, terms = self._totals
            if docs or terms:
                self.db.execute("UPDATE totals SET docs = docs + ?, terms = terms + ?", (docs, terms))
            self.db.execute("COMMIT")
        except BaseException:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            self._forget_memory()
            raise
        finally:
            self._totals = (0, 0)
            self._moved.clear()
        self.segments.committed()

    def _write_moved(self) -> None:
        """The watermarks moved in the transaction so far, written in one statement."""
        if self._moved:
            self.db.executemany("UPDATE sources SET watermark = ? WHERE id = ?", _swapped(self._moved))
            self._moved.clear()

    def _forget_memory(self) -> None:
        """What is kept in memory of the tables may be ahead of them (a rolled-back transaction): read it again."""
        self._sources = self._columns = self._marks = self._next_doc = None
        self._ids.clear()
        self.segments.forget_memory()

    def watermark(self, source: SourceRef) -> str | None:
        return self._watermarks().get(source)

    def add(self, source: SourceRef, docs: Sequence[SearchDoc], watermark: str, *, past_mark: bool = False) -> None:
        """Add `docs` to `source` and move its watermark; a doc already stored at the same seq is replaced, unless
        `past_mark` (the docs all follow the source's current watermark, so no stored doc has their seqs)."""
        with self.transaction():
            source_id = self._source_id(source, watermark)
            if not past_mark:
                self._delete_docs("source_id = ? AND seq IN (SELECT value FROM json_each(?))", source_id, docs)
            self._insert(source_id, docs)

    def replace_source(self, source: SourceRef, docs: Sequence[SearchDoc], watermark: str) -> None:
        with self.transaction():
            source_id = self._source_id(source, watermark)
            self._delete_docs("source_id = ?", source_id)
            self._insert(source_id, docs)

    def drop_source(self, source: SourceRef) -> None:
        self._drop("kind = ? AND session = ? AND name = ?", source.kind, source.session, source.name)

    def drop_session(self, session: str) -> None:
        self._drop("session = ? AND kind != ?", session, MEMORY)

    def purge(self) -> None:
        """No page, WAL frame or free list entry keeps text that was deleted."""
        merger = self.segments.merger
        with merger.lock if merger is not None else nullcontext():  # no merge reads or writes meanwhile
            with self.transaction():
                self.segments.compact(self.columns())
            self.db.execute("VACUUM")
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _drop(self, where: str, *params: object) -> None:
        with self.transaction():
            ids = [r[0] for r in self.db.execute(f"SELECT id FROM sources WHERE {where}", params)]
            for source_id in ids:
                self._delete_docs("source_id = ?", source_id)
                self.db.execute("DELETE FROM sources WHERE id = ?", (source_id,))
            self._write_moved()  # the watermarks are read from the table again next
            self._sources = self._marks = None
            self._ids.clear()

    def _source_id(self, source: SourceRef, watermark: str) -> int:
        """The source's id, its watermark moved (a source this index wrote before: at the commit, all of the
        transaction's in one statement; a new one: inserted now, for its id)."""
        known = self._ids.get(source)
        if known is not None and self._marks is not None:
            self._moved[known] = watermark
            self._marks[source] = watermark
            return known
        row = self.db.execute(
            "INSERT INTO sources(kind, session, name, watermark) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(kind, session, name) DO UPDATE SET watermark = excluded.watermark RETURNING id",
            (source.kind, source.session, source.name, watermark),
        ).fetchone()
        if self._sources is not None and row[0] not in self._sources:
            self._sources = None
        if self._marks is not None:
            self._marks[source] = watermark
        self._ids[source] = int(row[0])
        return int(row[0])

    def _delete_docs(self, where: str, source_id: int, docs: Sequence[SearchDoc] | None = None) -> None:
        params: list[object] = [source_id]
        if docs is not None:
            if not docs:
                return
            params.append(json.dumps([d.passage.seq for d in docs]))
        rows = self.db.execute(f"SELECT id, dl FROM docs WHERE {where}", params).fetchall()
        if not rows:
            return
        ids = [r[0] for r in rows]
        self.db.execute(f"DELETE FROM docs WHERE {where}", params)
        self.segments.drop(ids)
        self.columns().drop(ids)
        self._count(-len(rows), -sum(r[1] for r in rows))

    def _insert(self, source_id: int, docs: Sequence[SearchDoc]) -> None:
        if not docs:
            return
        columns = self.columns()
        first = self._next_id()
        ids = range(first, first + len(docs))
        self._next_doc = first + len(docs)
        self.db.executemany(
            "INSERT INTO docs(id, source_id, seq, role, speaker, ts, dl, text) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(i, source_id, p.seq, p.role, p.speaker, p.ts, len(d.terms), p.text) for i, d, p in _numbered(ids, docs)],
        )
        columns.put_many(first, source_id, [len(d.terms) for d in docs], [d.passage.ts for d in docs])
        self._count(len(docs), sum(len(d.terms) for d in docs))
        self.segments.add([(doc_id, d.terms) for doc_id, d in zip(ids, docs, strict=True)])

    def _next_id(self) -> int:
        """What AUTOINCREMENT would give the next doc, numbered here (one executemany per batch of docs)."""
        if self._next_doc is None:
            row = self.db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'docs'").fetchone()
            self._next_doc = (int(row[0]) if row else 0) + 1
        return self._next_doc

    def _count(self, docs: int, terms: int) -> None:
        """N and the total length move by these (written once, when the transaction commits)."""
        self._totals = (self._totals[0] + docs, self._totals[1] + terms)

    def columns(self) -> DocColumns:
        """Every stored doc's source, length and ts by id (read from `docs` once, then kept up to date)."""
        if self._columns is None:
            row = self.db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'docs'").fetchone()
            columns = DocColumns((int(row[0]) if row else 0) + 1024)  # above every id a segment may still hold
            for doc_id, source_id, dl, ts in self.db.execute("SELECT id, source_id, dl, ts FROM docs"):
                columns.put(doc_id, source_id, dl, ts)
            self._columns = columns
        return self._columns

    # ---- searching -----------------------------------------------------------------------------

    def search(self, terms: Sequence[str], scope: SearchScope, limit: int) -> list[SearchHit]:
        with self.traffic.searching():  # a merge under way waits meanwhile
            return self._search(terms, scope, limit)

    def _search(self, terms: Sequence[str], scope: SearchScope, limit: int) -> list[SearchHit]:
        allowed = self._allowed(scope)
        n_docs, n_terms = self.db.execute("SELECT docs, terms FROM totals").fetchone()
        if not allowed or n_docs == 0 or not terms:
            return []
        columns = self.columns()
        postings = self.segments.read(list(dict.fromkeys(terms)), columns)
        if not postings:
            return []
        ts_min, ts_max = self.db.execute(  # two lookups in docs_ts (min and max in one SELECT scan the table)
            "SELECT (SELECT min(ts) FROM docs), (SELECT max(ts) FROM docs)"
        ).fetchone()
        assert self._sources is not None
        shown: np.ndarray[Any, np.dtype[np.bool_]] | None = None  # by source id: does the scope show its docs
        if len(allowed) < len(self._sources):
            shown = np.zeros(max(self._sources) + 1, np.bool_)
            shown[allowed] = True
        keep = 2 * limit  # a message is at most twice a hit (archive and history): enough distinct ones remain
        ranking = Ranking(n_docs, n_terms / n_docs, ts_min, ts_max)
        best = best_docs([(docs, tfs) for _, docs, tfs in postings], columns, shown, ranking, keep)
        scored = {doc_id: score for doc_id, (score, _) in best.items()}
        return self._hits(list(scored), scored, limit)

    def newest(self, scope: SearchScope) -> int | None:
        """The time of the newest message the scope shows (the last record of the history or the archive of each of
        its sessions: one, or every session of a channel it accepts): the scope's now, which a question's "last week"
        counts from."""
        allowed = self._allowed(scope)  # loads the sources
        assert self._sources is not None
        shown = [i for i in allowed if self._sources[i].kind != MEMORY]
        row = self.db.execute(_NEWEST, (json.dumps(shown),)).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def _allowed(self, scope: SearchScope) -> list[int]:
        """The ids of the sources the scope shows."""
        if self._sources is None:
            rows = self.db.execute("SELECT id, kind, session, name FROM sources").fetchall()
            self._sources = {r[0]: SourceRef(r[1], r[2], r[3]) for r in rows}
            self._grouped = _grouped(self._sources)
        memory, sessions, channels = self._grouped
        allowed = [i for name in scope.memory_names for i in memory.get(name, ())]
        if scope.session is not None:
            return allowed + sessions.get(scope.session, [])
        for channel, ids in channels.items():
            if scope.agent_scoped(channel):
                allowed += ids
        return allowed

    def _hits(self, best: list[int], scored: dict[int, float], limit: int) -> list[SearchHit]:
        if not best:
            return []
        rows = self.db.execute(
            f"SELECT {_DOC} FROM docs d WHERE d.id IN (SELECT value FROM json_each(?))", (json.dumps(best),)
        )
        passages = {r[0]: (r[1], self._passage(r)) for r in rows}
        ranked = sorted(passages, key=lambda d: rank_key(scored[d], passages[d][1]))
        hits: list[SearchHit] = []
        seen: set[tuple[str, str, int | None, str]] = set()
        for doc_id in ranked:
            source_id, passage = passages[doc_id]
            if identity(passage) in seen:
                continue
            seen.add(identity(passage))
            before, after = self._neighbours(source_id, passage.seq)
            hits.append(SearchHit(passage, scored[doc_id], before, after))
            if len(hits) == limit:
                break
        return hits

    def _neighbours(self, source_id: int, seq: int) -> tuple[Passage | None, Passage | None]:
        before = self.db.execute(
            f"SELECT {_DOC} FROM docs d WHERE source_id = ? AND seq < ? ORDER BY seq DESC LIMIT 1", (source_id, seq)
        ).fetchone()
        after = self.db.execute(
            f"SELECT {_DOC} FROM docs d WHERE source_id = ? AND seq > ? ORDER BY seq LIMIT 1", (source_id, seq)
        ).fetchone()
        return (self._passage(before) if before else None), (self._passage(after) if after else None)

    def _passage(self, row: tuple[int, int, int, str, str | None, int | None, str]) -> Passage:
        assert self._sources is not None
        _, source_id, seq, role, speaker, ts, text = row
        return Passage(self._sources[source_id], seq, role, speaker, ts, text)

    def stats(self) -> dict[str, int]:
        n_docs, n_terms = self.db.execute("SELECT docs, terms FROM totals").fetchone()
        sources = self.db.execute("SELECT count(*) FROM sources").fetchone()[0]
        return {"docs": int(n_docs), "terms": int(n_terms), "sources": int(sources), **self.segments.counts()}


def _swapped(moved: dict[int, str]) -> list[tuple[str, int]]:
    return [(watermark, source_id) for source_id, watermark in moved.items()]


def _numbered(ids: range, docs: Sequence[SearchDoc]) -> Iterator[tuple[int, SearchDoc, Passage]]:
    return ((i, d, d.passage) for i, d in zip(ids, docs, strict=True))


_Grouped = tuple[dict[str, list[int]], dict[str, list[int]], dict[str, list[int]]]


_NEWEST = "SELECT max((SELECT ts FROM docs WHERE source_id = s.value ORDER BY seq DESC LIMIT 1)) FROM json_each(?) s"
"""The newest of the last docs of some sources (one probe of UNIQUE(source_id, seq) each)."""


def _grouped(sources: dict[int, SourceRef]) -> _Grouped:
    memory: dict[str, list[int]] = {}
    sessions: dict[str, list[int]] = {}
    channels: dict[str, list[int]] = {}
    for source_id, ref in sources.items():
        if ref.kind == MEMORY:
            memory.setdefault(ref.name, []).append(source_id)
        else:
            sessions.setdefault(ref.session, []).append(source_id)
            channels.setdefault(session_channel(ref.session), []).append(source_id)
    return memory, sessions, channels


def remove_index_files(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with suppress(FileNotFoundError):
            path.with_name(path.name + suffix).unlink()
