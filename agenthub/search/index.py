"""One agent's search index: SQLite FTS5 (trigram) over its JSONL histories, archives and memory files.

Everything here is blocking and runs on the search service's one worker thread. Each source file is tracked by
inode, size and mtime plus a signature of what was read, so an append is indexed by reading only the new bytes,
a rewritten file (compaction's atomic replace) is indexed again from the start, and a restart catches up with
whatever changed while nothing was watching. The database is derived data: deleting it only costs a rebuild.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from agenthub import jsonsafe
from agenthub.search.extract import message_text, skipped_tool_ids
from agenthub.storage.keys import SessionKey, key_from_file_stem
from agenthub.storage.paths import AgentLayout

log = structlog.get_logger(__name__)

SCHEMA_VERSION = "1"
HISTORY, ARCHIVE, MEMORY = "history", "archive", "memory"
MIN_TRIGRAM_CHARS = 3
# A 1- or 2-character term (夜莺) has no trigram of its own: it is looked up as the trigrams that start with it.
# Every text is indexed with two char(31) appended (whitespace to a query, so never part of a term), so each
# occurrence starts some trigram, even at the very end of a text. A term starting more distinct trigrams than
# MAX_EXPANSIONS is common: its rows are scanned instead, newest first, and the limit is reached soon.
MAX_EXPANSIONS = 500
_HEAD_BYTES = 4096
_TAIL_BYTES = 64

_SCHEMA = """
CREATE TABLE IF NOT EXISTS settings(name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sources(
    id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, kind TEXT NOT NULL, session TEXT NOT NULL,
    ino INTEGER NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    offset INTEGER NOT NULL, head BLOB NOT NULL, tail BLOB NOT NULL,
    next_ord INTEGER NOT NULL, hidden_lines INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS sources_session ON sources(session);
CREATE TABLE IF NOT EXISTS docs(
    id INTEGER PRIMARY KEY, source_id INTEGER NOT NULL, ord INTEGER NOT NULL,
    role TEXT NOT NULL, ts INTEGER, text TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS docs_source ON docs(source_id, ord);
CREATE VIRTUAL TABLE IF NOT EXISTS docs_fts USING fts5(text, content='docs', content_rowid='id', tokenize='trigram');
CREATE VIRTUAL TABLE IF NOT EXISTS docs_vocab USING fts5vocab(docs_fts, 'row');
CREATE TRIGGER IF NOT EXISTS docs_ai AFTER INSERT ON docs BEGIN
    INSERT INTO docs_fts(rowid, text) VALUES (new.id, new.text || char(31, 31));
END;
CREATE TRIGGER IF NOT EXISTS docs_ad AFTER DELETE ON docs BEGIN
    INSERT INTO docs_fts(docs_fts, rowid, text) VALUES ('delete', old.id, old.text || char(31, 31));
END;
CREATE TABLE IF NOT EXISTS skipped_tool_uses(id TEXT PRIMARY KEY);
"""


_CHANNEL = "substr(session, instr(session, ':') + 1, instr(substr(session, instr(session, ':') + 1), ':') - 1)"
"""SQL: the channel part of a sources row's `agent:channel:chat_id` session key (agent and channel hold no ':')."""


def _no_channel(channel: str) -> bool:
    return False


@dataclass(frozen=True)
class SearchScope:
    """What one search may see: one session's rows (or, when `session` is None, the rows of every session whose
    channel `agent_scoped` accepts: the chats that share the agent's memory, never a chat-scoped one) and these
    files."""

    session: str | None
    memory_files: tuple[tuple[Path, str], ...] = ()  # (path, label)
    agent_scoped: Callable[[str], bool] = field(default=_no_channel, compare=False)


@dataclass(frozen=True)
class Hit:
    session: str  # the session key, "" for a memory file
    kind: str  # history | archive | memory
    label: str  # a memory file's label
    role: str
    ts: int | None  # ms since epoch
    text: str


@dataclass
class _Source:
    id: int
    ino: int
    size: int
    mtime_ns: int
    offset: int
    head: bytes
    tail: bytes
    next_ord: int
    hidden_lines: int

    @property
    def stat(self) -> tuple[int, int, int]:
        return self.ino, self.size, self.mtime_ns


@dataclass
class _Batch:
    """Rows parsed from one read of a JSONL source."""

    rows: list[tuple[int, str, int | None, str]] = field(default_factory=list)  # (ord, role, ts, text)
    skipped_ids: list[str] = field(default_factory=list)
    lines: int = 0


def index_path(layout: AgentLayout) -> Path:
    return layout.root / "index" / "search.sqlite3"


class SearchIndex:
    """The index of one agent; use it from one thread only."""

    def __init__(self, layout: AgentLayout) -> None:
        self.layout = layout
        self.path = index_path(layout)
        self.db = self._open()

    # ---- opening -------------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return self._connect()
        except sqlite3.DatabaseError:  # corrupt or from another schema: derived data, start again
            log.warning("search_index_rebuilt", agent=self.layout.agent)
            remove_index_files(self.path)
            return self._connect()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
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

    # ---- keeping up ----------------------------------------------------------------------------

    def catch_up(self, stop: Callable[[], bool] = lambda: False) -> int:
        """Bring every history and archive file up to date (cheap for unchanged files: one stat); drop vanished
        ones. Returns the number of files looked at."""
        seen: set[str] = set()
        for path, kind, key in self._jsonl_files():
            if stop():
                return len(seen)
            seen.add(str(path))
            self.sync_jsonl(path, kind, str(key))
        known = self.db.execute("SELECT id, path FROM sources WHERE kind IN (?, ?)", (HISTORY, ARCHIVE)).fetchall()
        for source_id, path in known:
            if path not in seen:
                self._drop_source(source_id)
        return len(seen)

    def _jsonl_files(self) -> Iterator[tuple[Path, str, SessionKey]]:
        for directory, kind in ((self.layout.sessions_dir, HISTORY), (self.layout.archive_dir, ARCHIVE)):
            if not directory.is_dir():
                continue
            for path in sorted(directory.glob("*.jsonl")):
                key = key_from_file_stem(path.stem)
                if key is not None and key.agent == self.layout.agent:
                    yield path, kind, key

    def sync_session(self, key: SessionKey, op: str) -> None:
        """After `op` landed on `key`'s files: index what changed; a delete takes the session out of the index."""
        history, archive = self.layout.history_file(key), self.layout.archive_file(key)
        self.sync_jsonl(history, HISTORY, str(key), rewritten=op in ("replace", "clear", "delete"))
        self.sync_jsonl(archive, ARCHIVE, str(key))
        if op == "delete":
            self._hide_source(archive)

    def purge(self, keys: Iterable[SessionKey]) -> None:
        """After these sessions' files were deleted, or rewritten by "forget me" (and memory files scrubbed): index
        them again from what the files now hold, then rebuild the database, so no free page, old FTS segment or WAL
        frame keeps the text that is gone."""
        for key in keys:
            self.sync_jsonl(self.layout.history_file(key), HISTORY, str(key), rewritten=True)
            self.sync_jsonl(self.layout.archive_file(key), ARCHIVE, str(key), rewritten=True)
        for path, label in self.db.execute("SELECT path, session FROM sources WHERE kind = ?", (MEMORY,)).fetchall():
            self.sync_memory(Path(path), label)
        self.db.execute("INSERT INTO docs_fts(docs_fts) VALUES ('optimize')")
        self.db.execute("VACUUM")
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def sync_jsonl(self, path: Path, kind: str, session: str, *, rewritten: bool = False) -> None:
        source = self._source(path)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            if source is not None:
                self._drop_source(source.id)
            return
        with closing(os.fdopen(fd, "rb")) as file:
            st = os.fstat(fd)
            if source is not None and not rewritten and (st.st_ino, st.st_size, st.st_mtime_ns) == source.stat:
                return
            resumed = source if source is not None and not rewritten and _continues(fd, st.st_size, source) else None
            start, first_ord = (resumed.offset, resumed.next_ord) if resumed is not None else (0, 0)
            hidden = source.hidden_lines if source is not None else 0
            file.seek(start)
            data = file.read(max(0, st.st_size - start))
            consumed = data[: data.rfind(b"\n") + 1]
            batch = self._parse(consumed, first_ord, hidden)
            offset = start + len(consumed)
            head = _digest(os.pread(fd, min(_HEAD_BYTES, offset), 0))
            tail = os.pread(fd, min(_TAIL_BYTES, offset), offset - min(_TAIL_BYTES, offset))
        with self.db:  # one transaction per file
            self.db.execute("BEGIN")
            if source is not None and resumed is None:  # rewritten: index it again from the start
                self.db.execute("DELETE FROM docs WHERE source_id = ?", (source.id,))
            source_id = self._store_source(
                path, kind, session, st, offset, head, tail, first_ord + batch.lines, hidden, source
            )
            self._insert(source_id, batch)

    def sync_memory(self, path: Path, label: str) -> int | None:
        """Index a memory file again if it changed (one stat when it did not); its source id, None if absent."""
        source = self._source(path)
        try:
            st = path.stat()
        except FileNotFoundError:
            if source is not None:
                self._drop_source(source.id)
            return None
        if source is not None and (st.st_ino, st.st_size, st.st_mtime_ns) == source.stat:
            return source.id
        text = path.read_text(encoding="utf-8", errors="replace")
        ts = st.st_mtime_ns // 1_000_000
        batch = _Batch(lines=len(text.splitlines()))
        batch.rows = [(n, MEMORY, ts, line.strip()) for n, line in enumerate(text.splitlines()) if line.strip()]
        with self.db:
            self.db.execute("BEGIN")
            if source is not None:
                self.db.execute("DELETE FROM docs WHERE source_id = ?", (source.id,))
            source_id = self._store_source(path, MEMORY, label, st, st.st_size, b"", b"", batch.lines, 0, source)
            self._insert(source_id, batch)
        return source_id

    def _parse(self, data: bytes, first_ord: int, hidden_lines: int) -> _Batch:
        batch = _Batch()
        tool_names: dict[str, str] = {}
        for number, line in enumerate(data.split(b"\n")[:-1], start=first_ord):
            batch.lines += 1
            record = _record(line)
            if record is None:
                continue
            batch.skipped_ids.extend(skipped_tool_ids(record))
            text = message_text(record, tool_names, self._known_skipped)
            if text and number >= hidden_lines:
                ts = record.get("timestamp")
                batch.rows.append((number, str(record.get("role") or ""), ts if isinstance(ts, int) else None, text))
        return batch

    def _known_skipped(self, tool_use_id: str) -> bool:
        return self.db.execute("SELECT 1 FROM skipped_tool_uses WHERE id = ?", (tool_use_id,)).fetchone() is not None

    def _insert(self, source_id: int, batch: _Batch) -> None:
        self.db.executemany(
            "INSERT INTO docs(source_id, ord, role, ts, text) VALUES (?, ?, ?, ?, ?)",
            [(source_id, *row) for row in batch.rows],
        )
        self.db.executemany("INSERT OR IGNORE INTO skipped_tool_uses VALUES (?)", [(i,) for i in batch.skipped_ids])

    def _source(self, path: Path) -> _Source | None:
        row = self.db.execute(
            "SELECT id, ino, size, mtime_ns, offset, head, tail, next_ord, hidden_lines FROM sources WHERE path = ?",
            (str(path),),
        ).fetchone()
        return None if row is None else _Source(*row)

    def _store_source(
        self,
        path: Path,
        kind: str,
        session: str,
        st: os.stat_result,
        offset: int,
        head: bytes,
        tail: bytes,
        next_ord: int,
        hidden_lines: int,
        old: _Source | None,
    ) -> int:
        values = (st.st_ino, st.st_size, st.st_mtime_ns, offset, head, tail, next_ord, hidden_lines)
        if old is not None:
            self.db.execute(
                "UPDATE sources SET ino=?, size=?, mtime_ns=?, offset=?, head=?, tail=?, next_ord=?, hidden_lines=? "
                "WHERE id = ?",
                (*values, old.id),
            )
            return old.id
        cursor = self.db.execute(
            "INSERT INTO sources(path, kind, session, ino, size, mtime_ns, offset, head, tail, next_ord, hidden_lines)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (str(path), kind, session, *values),
        )
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    def _drop_source(self, source_id: int) -> None:
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute("DELETE FROM docs WHERE source_id = ?", (source_id,))
            self.db.execute("DELETE FROM sources WHERE id = ?", (source_id,))

    def _hide_source(self, path: Path) -> None:
        """Take a file's rows out of the index for good (a deleted session's archive, if the file stays)."""
        source = self._source(path)
        if source is None:
            return
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute("DELETE FROM docs WHERE source_id = ?", (source.id,))
            self.db.execute("UPDATE sources SET hidden_lines = next_ord WHERE id = ?", (source.id,))

    # ---- searching -----------------------------------------------------------------------------

    def search(self, terms: list[str], scope: SearchScope, limit: int) -> list[Hit]:
        """Rows holding every term (case-insensitive substrings), newest first, without duplicates."""
        if not terms:
            return []
        memory_ids = [i for i in (self.sync_memory(path, label) for path, label in scope.memory_files) if i]
        conditions, params = self._scope_filter(scope, memory_ids)
        if conditions is None:
            return []
        match: list[str] = [_phrase(t) for t in terms if len(t) >= MIN_TRIGRAM_CHARS]
        for term in (t for t in terms if len(t) < MIN_TRIGRAM_CHARS):
            trigrams = self._trigrams_starting(term.lower())
            if not trigrams:
                return []  # no text holds it
            if len(trigrams) <= MAX_EXPANSIONS:
                match.append("(" + " OR ".join(_phrase(t) for t in trigrams) + ")")
                continue
            cased = term.lower() != term.upper()  # CJK has no case: skip lower() over every row scanned
            conditions.append("instr(lower(d.text), ?) > 0" if cased else "instr(d.text, ?) > 0")
            params.append(term.lower())
        where = " AND ".join(conditions) or "1"
        columns = "d.source_id, d.role, d.ts, d.text"
        if match:  # the trigram index finds the rows; FTS5 walks them newest first and stops at the limit
            sql = (
                f"SELECT {columns} FROM docs_fts JOIN docs d ON d.id = docs_fts.rowid "
                f"WHERE docs_fts MATCH ? AND {where} ORDER BY docs_fts.rowid DESC LIMIT ?"
            )
            params = [" AND ".join(match), *params]
        else:  # only very common short terms: scan the scope's rows newest first, the limit comes soon
            sql = f"SELECT {columns} FROM docs d WHERE {where} ORDER BY d.id DESC LIMIT ?"
        rows = self.db.execute(sql, [*params, limit * 4]).fetchall()  # the most recently indexed candidates
        rows.sort(key=lambda r: r[2] or 0, reverse=True)  # shown newest first (a rebuild indexes in file order)
        return _distinct(rows, self._source_names({r[0] for r in rows}), limit)

    def _trigrams_starting(self, prefix: str) -> list[str]:
        """The indexed trigrams that start with `prefix` (up to one more than MAX_EXPANSIONS)."""
        rows = self.db.execute(
            "SELECT term FROM docs_vocab WHERE term >= ? AND term < ? LIMIT ?",
            (prefix, prefix + "\U0010ffff", MAX_EXPANSIONS + 1),
        ).fetchall()
        return [r[0] for r in rows]

    def _scope_filter(self, scope: SearchScope, memory_ids: list[int]) -> tuple[list[str] | None, list[Any]]:
        """SQL conditions on `d.source_id`: this chat's files, or the agent-scoped sessions' files; and only these
        memory files."""
        if scope.session is None:
            return self._agent_scoped_filter(scope.agent_scoped, memory_ids)
        rows = self.db.execute(
            "SELECT id FROM sources WHERE session = ? AND kind IN (?, ?)", (scope.session, HISTORY, ARCHIVE)
        ).fetchall()
        ids = [r[0] for r in rows] + memory_ids
        if not ids:
            return None, []
        return ["d.source_id IN (SELECT value FROM json_each(?))"], [json.dumps(ids)]

    def _agent_scoped_filter(
        self, agent_scoped: Callable[[str], bool], memory_ids: list[int]
    ) -> tuple[list[str] | None, list[Any]]:
        """The sessions whose channel shares the agent's memory (decided once per channel) and these memory files;
        no other memory file."""
        channels = [
            r[0] for r in self.db.execute(f"SELECT DISTINCT {_CHANNEL} FROM sources WHERE kind != ?", (MEMORY,))
        ]
        allowed = [c for c in channels if agent_scoped(c)]
        if len(allowed) < len(channels):
            condition = (
                f"d.source_id IN (SELECT id FROM sources WHERE (kind != ? AND {_CHANNEL} IN "
                "(SELECT value FROM json_each(?))) OR id IN (SELECT value FROM json_each(?)))"
            )
            return [condition], [MEMORY, json.dumps(allowed), json.dumps(memory_ids)]
        condition = (
            "d.source_id NOT IN (SELECT id FROM sources WHERE kind = ? AND id NOT IN (SELECT value FROM json_each(?)))"
        )
        return [condition], [MEMORY, json.dumps(memory_ids)]

    def _source_names(self, ids: set[int]) -> dict[int, tuple[str, str]]:
        if not ids:
            return {}
        rows = self.db.execute(
            f"SELECT id, session, kind FROM sources WHERE id IN ({','.join('?' * len(ids))})", list(ids)
        ).fetchall()
        return {r[0]: (r[1], r[2]) for r in rows}

    def stats(self) -> dict[str, int]:
        docs = self.db.execute("SELECT count(*) FROM docs").fetchone()[0]
        sources = self.db.execute("SELECT count(*) FROM sources").fetchone()[0]
        return {"docs": int(docs), "sources": int(sources)}


def remove_index_files(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with suppress(FileNotFoundError):
            path.with_name(path.name + suffix).unlink()


def _continues(fd: int, size: int, source: _Source) -> bool:
    """True if the file is still the one indexed up to `source.offset`, only longer (an append, not a rewrite)."""
    if size < source.offset:
        return False
    head = _digest(os.pread(fd, min(_HEAD_BYTES, source.offset), 0))
    tail_len = min(_TAIL_BYTES, source.offset)
    return head == source.head and os.pread(fd, tail_len, source.offset - tail_len) == source.tail


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def _record(line: bytes) -> dict[str, Any] | None:
    if not line.strip():
        return None
    try:
        record = jsonsafe.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _phrase(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _distinct(
    rows: Iterable[tuple[int, str, int | None, str]], sources: dict[int, tuple[str, str]], limit: int
) -> list[Hit]:
    """One hit per message: the same message in the archive twice (a crash between archive and replace) or in
    both the archive and the history counts once."""
    hits: list[Hit] = []
    seen: set[tuple[str, str, int | None, str]] = set()
    for source_id, role, ts, text in rows:
        session, kind = sources[source_id]
        identity = (session, role, ts, text)
        if identity in seen:
            continue
        seen.add(identity)
        hits.append(Hit("" if kind == MEMORY else session, kind, session if kind == MEMORY else "", role, ts, text))
        if len(hits) == limit:
            break
    return hits
