"""One agent's search index in SQLite (`data/<agent>/index/search.sqlite3`): docs, postings and BM25 ranking.

Blocking, used from one thread (the files backend's worker). Ranks exactly as `agenthub.storage.search_index`
says, over its own postings tables (each posting carries its doc's length, source and time, so the scores are
summed and ordered inside SQLite, reading only the query terms' postings). The database is derived data:
damaged, missing or of another schema version it is removed and recreated empty, and the indexer catches up from
the files by their watermarks (none: everything), so no turn is lost.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

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
from agenthub.storage.search_topk import Ranking, best_docs, pack_terms, unpack_terms

log = structlog.get_logger(__name__)

SCHEMA_VERSION = "6"
"""6: postings in (tf, length, doc) order for the top-k bound, and docs hold their speaker and CJK character grams
(an index of another version is rebuilt from the files)."""
_CHUNK = 500  # host parameters per statement
SCOPE_SCAN_DOCS = 5000
"""A scope of at most this many docs (one chat) is scored doc by doc instead of through the postings."""
FRESH_ROWS = 16000
"""New postings wait in the small append-only table `fresh` (one page or two per message, not one per term) until
this many have gathered; then they are merged into `postings` in term order, in one step (a merge writes about a
page per distinct term, so fewer, larger merges write less per posting; a search reads `fresh` whole, ~2 ms)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS settings(name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS totals(
    id INTEGER PRIMARY KEY CHECK (id = 1), docs INTEGER NOT NULL, terms INTEGER NOT NULL, fresh INTEGER NOT NULL);
INSERT OR IGNORE INTO totals VALUES (1, 0, 0, 0);
CREATE TABLE IF NOT EXISTS sources(
    id INTEGER PRIMARY KEY, kind TEXT NOT NULL, session TEXT NOT NULL, name TEXT NOT NULL,
    watermark TEXT NOT NULL, UNIQUE(kind, session, name));
CREATE INDEX IF NOT EXISTS sources_session ON sources(session);
CREATE TABLE IF NOT EXISTS docs(
    id INTEGER PRIMARY KEY, source_id INTEGER NOT NULL, seq INTEGER NOT NULL, role TEXT NOT NULL, speaker TEXT,
    ts INTEGER, dl INTEGER NOT NULL, text TEXT NOT NULL, tids BLOB NOT NULL, UNIQUE(source_id, seq));
CREATE INDEX IF NOT EXISTS docs_ts ON docs(ts);
CREATE TABLE IF NOT EXISTS terms(id INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE, df INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS postings(
    term_id INTEGER NOT NULL, tf INTEGER NOT NULL, dl INTEGER NOT NULL, doc_id INTEGER NOT NULL,
    PRIMARY KEY(term_id, tf, dl, doc_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fresh(
    doc_id INTEGER NOT NULL, term TEXT NOT NULL, tf INTEGER NOT NULL, dl INTEGER NOT NULL, source_id INTEGER NOT NULL,
    ts INTEGER);
"""

_DOC = "d.id, d.source_id, d.seq, d.role, d.speaker, d.ts, d.text"


class SqliteSearchIndex:
    """The index of one agent; use it from one thread only."""

    def __init__(self, path: Path, agent: str = "", *, fresh_rows: int = FRESH_ROWS) -> None:
        self.path = path
        self.agent = agent
        self.fresh_rows = fresh_rows
        self.rebuilt = False
        """True when the database had to be created anew (damaged, missing or of another schema)."""
        self.db = self._open()
        self._sources: dict[int, SourceRef] | None = None  # cache of the sources table

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
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
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

    def close(self) -> None:
        self.db.close()

    # ---- writing -------------------------------------------------------------------------------

    def watermarks(self) -> dict[SourceRef, str]:
        rows = self.db.execute("SELECT kind, session, name, watermark FROM sources").fetchall()
        return {SourceRef(k, s, n): w for k, s, n, w in rows}

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One atomic write; inside another one (a batch of sessions), part of it."""
        if self.db.in_transaction:
            yield
            return
        self.db.execute("BEGIN")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            self._sources = None
            raise
        self.db.execute("COMMIT")

    def watermark(self, source: SourceRef) -> str | None:
        row = self.db.execute(
            "SELECT watermark FROM sources WHERE kind = ? AND session = ? AND name = ?",
            (source.kind, source.session, source.name),
        ).fetchone()
        return None if row is None else str(row[0])

    def add(self, source: SourceRef, docs: Sequence[SearchDoc], watermark: str) -> None:
        with self.transaction():
            source_id = self._source_id(source, watermark)
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
        with self.transaction():
            self._merge()
        self.db.execute("VACUUM")
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _drop(self, where: str, *params: object) -> None:
        with self.transaction():
            ids = [r[0] for r in self.db.execute(f"SELECT id FROM sources WHERE {where}", params)]
            for source_id in ids:
                self._delete_docs("source_id = ?", source_id)
                self.db.execute("DELETE FROM sources WHERE id = ?", (source_id,))
            self._sources = None

    def _source_id(self, source: SourceRef, watermark: str) -> int:
        row = self.db.execute(
            "INSERT INTO sources(kind, session, name, watermark) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(kind, session, name) DO UPDATE SET watermark = excluded.watermark RETURNING id",
            (source.kind, source.session, source.name, watermark),
        ).fetchone()
        if self._sources is not None and row[0] not in self._sources:
            self._sources = None
        return int(row[0])

    def _delete_docs(self, where: str, source_id: int, docs: Sequence[SearchDoc] | None = None) -> None:
        params: list[object] = [source_id]
        if docs is not None:
            if not docs:
                return
            params.append(json.dumps([d.passage.seq for d in docs]))
        rows = self.db.execute(f"SELECT id, dl, tids FROM docs WHERE {where}", params).fetchall()
        if not rows:
            return
        if any(not tids for _, _, tids in rows):  # some still wait in `fresh`: merge them first
            self._merge()
            rows = self.db.execute(f"SELECT id, dl, tids FROM docs WHERE {where}", params).fetchall()
        keys = [
            (term_id, tf, dl, doc_id)
            for doc_id, dl, tids in rows
            for term_id, tf in zip(*unpack_terms(tids), strict=True)
        ]
        self.db.executemany("DELETE FROM postings WHERE term_id = ? AND tf = ? AND dl = ? AND doc_id = ?", keys)
        counts = Counter(key[0] for key in keys)
        self.db.executemany("UPDATE terms SET df = df - ? WHERE id = ?", [(n, t) for t, n in counts.items()])
        self.db.execute(f"DELETE FROM docs WHERE {where}", params)
        touched = json.dumps(list(counts))
        self.db.execute("DELETE FROM terms WHERE id IN (SELECT value FROM json_each(?)) AND df <= 0", (touched,))
        self.db.execute("UPDATE totals SET docs = docs - ?, terms = terms - ?", (len(rows), sum(r[1] for r in rows)))

    def _insert(self, source_id: int, docs: Sequence[SearchDoc]) -> None:
        if not docs:
            return
        fresh: list[tuple[int, str, int, int, int, int | None]] = []
        for doc in docs:
            p, dl = doc.passage, len(doc.terms)
            row = self.db.execute(
                "INSERT INTO docs(source_id, seq, role, speaker, ts, dl, text, tids) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, x'') RETURNING id",
                (source_id, p.seq, p.role, p.speaker, p.ts, dl, p.text),
            ).fetchone()
            fresh.extend((row[0], t, n, dl, source_id, p.ts) for t, n in Counter(doc.terms).items())
        self.db.executemany("INSERT INTO fresh VALUES (?, ?, ?, ?, ?, ?)", fresh)
        (waiting,) = self.db.execute(
            "UPDATE totals SET docs = docs + ?, terms = terms + ?, fresh = fresh + ? RETURNING fresh",
            (len(docs), sum(len(d.terms) for d in docs), len(fresh)),
        ).fetchone()
        if waiting >= self.fresh_rows:
            self._merge()

    def _merge(self) -> None:
        """Move the postings waiting in `fresh` into `terms` and `postings` (inside the caller's transaction)."""
        if self._fresh_rows() == 0:
            return
        self.db.execute(
            "INSERT INTO terms(term, df) SELECT term, count(*) FROM fresh WHERE true GROUP BY term "
            "ON CONFLICT(term) DO UPDATE SET df = df + excluded.df"
        )
        self.db.execute(
            "INSERT INTO postings SELECT t.id, f.tf, f.dl, f.doc_id "
            "FROM fresh f JOIN terms t ON t.term = f.term ORDER BY t.id, f.tf, f.dl, f.doc_id"
        )
        ids: dict[int, tuple[list[int], list[int]]] = {}
        for doc_id, term_id, tf in self.db.execute(
            "SELECT f.doc_id, t.id, f.tf FROM fresh f JOIN terms t ON t.term = f.term"
        ):
            pair = ids.setdefault(doc_id, ([], []))
            pair[0].append(term_id)
            pair[1].append(tf)
        self.db.executemany("UPDATE docs SET tids = ? WHERE id = ?", [(pack_terms(*p), d) for d, p in ids.items()])
        self.db.execute("DELETE FROM fresh")
        self.db.execute("UPDATE totals SET fresh = 0")

    def _fresh_rows(self) -> int:
        return int(self.db.execute("SELECT fresh FROM totals").fetchone()[0])

    # ---- searching -----------------------------------------------------------------------------

    def search(self, terms: Sequence[str], scope: SearchScope, limit: int) -> list[SearchHit]:
        allowed = self._allowed(scope)
        unique = list(dict.fromkeys(terms))
        fresh = self._fresh_postings(unique)  # one read of `fresh`: its rows and its share of df
        found = self._term_stats(unique, Counter(row[1] for row in fresh))
        n_docs, n_terms = self.db.execute("SELECT docs, terms FROM totals").fetchone()
        if not found or not allowed or n_docs == 0:
            return []
        ts_min, ts_max = self.db.execute(  # two lookups in docs_ts (min and max in one SELECT scan the table)
            "SELECT (SELECT min(ts) FROM docs), (SELECT max(ts) FROM docs)"
        ).fetchone()
        keep = 2 * limit  # a message is at most twice a hit (archive and history): enough distinct ones remain
        ranking = Ranking(n_docs, n_terms / n_docs, ts_min, ts_max, frozenset(allowed))
        best = best_docs(self.db, found, fresh, ranking, keep, self._scope_docs(allowed))
        scored = {doc_id: score for doc_id, (score, _) in best.items()}
        return self._hits(list(scored), scored, limit)

    def _fresh_postings(self, terms: list[str]) -> list[tuple[int, str, int, int, int, int | None]]:
        if self._fresh_rows() == 0:
            return []
        rows = self.db.execute(
            "SELECT doc_id, term, tf, dl, source_id, ts FROM fresh WHERE term IN (SELECT value FROM json_each(?))",
            (json.dumps(terms),),
        )
        return [tuple(r) for r in rows]

    def _scope_docs(self, allowed: set[int]) -> list[int] | None:
        """Every doc of a scope of a few sources (one chat), or None for a wide one (read through the postings)."""
        assert self._sources is not None
        if len(allowed) * 4 > len(self._sources):
            return None
        ids = json.dumps(sorted(allowed))
        (count,) = self.db.execute(
            "SELECT count(*) FROM docs WHERE source_id IN (SELECT value FROM json_each(?))", (ids,)
        ).fetchone()
        if count > SCOPE_SCAN_DOCS:
            return None
        sql = "SELECT id FROM docs WHERE source_id IN (SELECT value FROM json_each(?))"
        return [r[0] for r in self.db.execute(sql, (ids,))]

    def _allowed(self, scope: SearchScope) -> set[int]:
        if self._sources is None:
            rows = self.db.execute("SELECT id, kind, session, name FROM sources").fetchall()
            self._sources = {r[0]: SourceRef(r[1], r[2], r[3]) for r in rows}
        names = set(scope.memory_names)
        channels: dict[str, bool] = {}
        allowed: set[int] = set()
        for source_id, ref in self._sources.items():
            if ref.kind == MEMORY:
                ok = ref.name in names
            elif scope.session is not None:
                ok = ref.session == scope.session
            else:
                channel = session_channel(ref.session)
                if channel not in channels:
                    channels[channel] = bool(scope.agent_scoped(channel))
                ok = channels[channel]
            if ok:
                allowed.add(source_id)
        return allowed

    def _term_stats(self, terms: list[str], waiting: Counter[str]) -> list[tuple[int | None, str, int]]:
        """(term id or None when it is only in `fresh`, term, df) of the query terms some doc holds, in query order.
        `waiting`: how many docs in `fresh` hold each."""
        merged: dict[str, tuple[int, int]] = {}
        for i in range(0, len(terms), _CHUNK):
            chunk = terms[i : i + _CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = self.db.execute(f"SELECT term, id, df FROM terms WHERE term IN ({marks}) AND df > 0", chunk)
            merged.update((t, (i_, df)) for t, i_, df in rows)
        found: list[tuple[int | None, str, int]] = []
        for term in terms:
            if term in merged or term in waiting:
                term_id, df = merged.get(term, (None, 0))
                found.append((term_id, term, df + waiting[term]))
        return found

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
        return {"docs": int(n_docs), "terms": int(n_terms), "sources": int(sources)}


def remove_index_files(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with suppress(FileNotFoundError):
            path.with_name(path.name + suffix).unlink()
