"""The `VectorStore` port (`[search.embeddings]`): one unit vector per searchable message, beside the search index,
and its files implementation (`data/<agent>/index/vectors.sqlite3`, one worker thread for every agent).

A vector is keyed by its session and the digest of its passage's identity (role, time, text: the same message in
the archive and in the history is one vector), and carries the passage itself, so a hit only the vectors found can
be shown. Nearest neighbours are found by brute force (cosine of unit vectors: a dot product) over the scope.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from agenthub.storage.paths import AgentLayout
from agenthub.storage.search_index import Passage, SearchScope, SourceRef, session_channel
from agenthub.storage.vector_cache import VectorCache

T = TypeVar("T")
Vector = NDArray[np.float32]


def digest_of(passage: Passage) -> str:
    """The key of a passage's vector within its session: its identity (role, time, text), not its place."""
    ts = "" if passage.ts is None else str(passage.ts)
    return hashlib.sha256(f"{passage.role}\0{ts}\0{passage.text}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Stored:
    """What the store holds of one vector (its passage's kind may change: compaction archives it)."""

    kind: str
    model: str


def vectors_path(layout: AgentLayout) -> Path:
    return layout.root / "index" / "vectors.sqlite3"


def in_scope(scope: SearchScope) -> Callable[[str], bool]:
    """Whether a session's vectors are in `scope` (`agent_scoped` asked once per channel)."""
    channels: dict[str, bool] = {}

    def allowed(session: str) -> bool:
        if scope.session is not None:
            return session == scope.session
        channel = session_channel(session)
        if channel not in channels:
            channels[channel] = bool(scope.agent_scoped(channel))
        return channels[channel]

    return allowed


def best(rows: Iterable[tuple[int, bytes]], query: Vector, limit: int) -> list[tuple[int, float]]:
    """(row id, cosine) of the `limit` rows nearest to `query`; rows of another length are skipped."""
    ids, blobs = [], []
    width = query.shape[0] * 4
    for row_id, blob in rows:
        if len(blob) == width:
            ids.append(row_id)
            blobs.append(blob)
    if not ids:
        return []
    matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(ids), query.shape[0])
    scores = matrix @ np.asarray(query, dtype=np.float32)
    order = np.argsort(-scores, kind="stable")[:limit]
    return [(ids[i], float(scores[i])) for i in order]


_SCHEMA = """
CREATE TABLE IF NOT EXISTS vectors(
    id INTEGER PRIMARY KEY, session TEXT NOT NULL, digest TEXT NOT NULL, kind TEXT NOT NULL, seq INTEGER NOT NULL,
    role TEXT NOT NULL, speaker TEXT, ts INTEGER, text TEXT NOT NULL, model TEXT NOT NULL, vec BLOB NOT NULL,
    UNIQUE(session, digest));
"""


class FileVectorStore:
    """Each agent's vectors in its own SQLite file beside its search index; blocking work on one worker thread."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="search-vectors")
        self._dbs: dict[str, sqlite3.Connection] = {}  # worker thread only
        self._caches: dict[str, VectorCache] = {}  # worker thread only: each agent's vectors of one model

    async def _run(self, agent: str, work: Callable[[sqlite3.Connection], T]) -> T:
        return await asyncio.wrap_future(self._executor.submit(lambda: work(self._db(agent))))

    def _db(self, agent: str) -> sqlite3.Connection:
        db = self._dbs.get(agent)
        if db is None:
            path = vectors_path(AgentLayout(self.data_dir, agent))
            path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
            self._dbs[agent] = db
        return db

    async def stored(self, agent: str, session: str) -> dict[str, Stored]:
        def read(db: sqlite3.Connection) -> dict[str, Stored]:
            rows = db.execute("SELECT digest, kind, model FROM vectors WHERE session = ?", (session,))
            return {digest: Stored(kind, model) for digest, kind, model in rows}

        return await self._run(agent, read)

    async def put(self, agent: str, model: str, items: Sequence[tuple[Passage, Vector]]) -> None:
        rows = [(*_passage_row(p), model, np.asarray(v, dtype="<f4").tobytes()) for p, v in items]

        def write(db: sqlite3.Connection) -> None:
            added: list[tuple[int, str, bytes]] = []
            replaced = False
            with db:
                for row in rows:
                    old = db.execute("DELETE FROM vectors WHERE session = ? AND digest = ?", row[:2])
                    replaced = replaced or old.rowcount > 0
                    cursor = db.execute(
                        "INSERT INTO vectors(session, digest, kind, seq, role, speaker, ts, text, model, vec) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        row,
                    )
                    added.append((int(cursor.lastrowid or 0), row[0], row[-1]))
            cache = self._caches.get(agent)
            if replaced or (cache is not None and cache.model != model):
                self._caches.pop(agent, None)
            elif cache is not None:
                cache.add(added)

        if rows:
            await self._run(agent, write)

    async def relabel(self, agent: str, session: str, kinds: Mapping[str, str]) -> None:
        def write(db: sqlite3.Connection) -> None:
            with db:
                db.executemany(
                    "UPDATE vectors SET kind = ? WHERE session = ? AND digest = ?",
                    [(kind, session, digest) for digest, kind in kinds.items()],
                )

        if kinds:
            await self._run(agent, write)

    async def remove(self, agent: str, session: str, digests: Collection[str]) -> None:
        def write(db: sqlite3.Connection) -> None:
            self._caches.pop(agent, None)
            with db:
                db.executemany("DELETE FROM vectors WHERE session = ? AND digest = ?", [(session, d) for d in digests])

        if digests:
            await self._run(agent, write)

    async def drop_session(self, agent: str, session: str) -> None:
        def write(db: sqlite3.Connection) -> None:
            self._caches.pop(agent, None)
            with db:
                db.execute("DELETE FROM vectors WHERE session = ?", (session,))

        await self._run(agent, write)

    async def nearest(
        self, agent: str, model: str, query: Vector, scope: SearchScope, limit: int
    ) -> list[tuple[Passage, float]]:
        allowed = in_scope(scope)

        def read(db: sqlite3.Connection) -> list[tuple[Passage, float]]:
            cache = self._caches.get(agent)
            if cache is None or cache.model != model or cache.dims != query.shape[0]:
                cache = self._caches[agent] = VectorCache(model, query.shape[0])
                cache.add(db.execute("SELECT id, session, vec FROM vectors WHERE model = ? ORDER BY id", (model,)))
            return [(_passage_of(db, row_id), score) for row_id, score in cache.top(query, allowed, limit)]

        return await self._run(agent, read)

    async def purge(self, agent: str) -> None:
        def vacuum(db: sqlite3.Connection) -> None:
            db.execute("VACUUM")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

        await self._run(agent, vacuum)

    async def close(self) -> None:
        def close_all() -> None:
            self._caches.clear()
            for db in self._dbs.values():
                db.close()
            self._dbs.clear()

        await asyncio.wrap_future(self._executor.submit(close_all))
        self._executor.shutdown(wait=False)


def _passage_row(p: Passage) -> tuple[str, str, str, int, str, str | None, int | None, str]:
    return (p.session, digest_of(p), p.kind, p.seq, p.role, p.speaker, p.ts, p.text)


def _passage_of(db: sqlite3.Connection, row_id: int) -> Passage:
    session, kind, seq, role, speaker, ts, text = db.execute(
        "SELECT session, kind, seq, role, speaker, ts, text FROM vectors WHERE id = ?", (row_id,)
    ).fetchone()
    return Passage(SourceRef(kind, session), seq, role, speaker, ts, text)
