"""`search_vectors`: the PostgreSQL `VectorStore`, shared by every instance (what one embeds, every one finds).

Nearest neighbours by brute force over each agent's vectors held in memory per process (`VectorCache`), kept level
with the table by the agent's row in `search_vector_state` (migration 12), read in the same statement as the rows
a search fetches: `generation` moves with every removal (the cache is read again whole), and a put numbers its rows
(`added`) in commit order under that row's lock, so a search reads only the rows added since its last one."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from agenthub.storage.postgres.database import Database
from agenthub.storage.search_index import Passage, SearchScope, SourceRef
from agenthub.storage.search_vectors import Stored, Vector, digest_of, in_scope
from agenthub.storage.vector_cache import VectorCache

_LOCK_AGENT = """
INSERT INTO search_vector_state AS s (agent, generation, appended) VALUES (%s, 0, 1)
ON CONFLICT (agent) DO UPDATE SET appended = s.appended + 1
"""
"""Taken first by a put: the agent's puts commit one at a time, so `added` grows in commit order per agent."""
_PUT = (
    "INSERT INTO search_vectors (agent, session, digest, kind, seq, role, speaker, ts, text, model, vec, added) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, nextval('search_vectors_added_seq')) "
    "ON CONFLICT (agent, session, digest) DO UPDATE SET "
    "kind = excluded.kind, seq = excluded.seq, model = excluded.model, vec = excluded.vec, added = excluded.added"
)
_REMOVED = """
INSERT INTO search_vector_state AS s (agent, generation, appended)
SELECT %(agent)s, 1, 0 WHERE EXISTS (SELECT 1 FROM gone)
ON CONFLICT (agent) DO UPDATE SET generation = s.generation + 1
RETURNING generation
"""
_READ = """
WITH state AS (SELECT coalesce((SELECT generation FROM search_vector_state WHERE agent = %(agent)s), 0) AS g)
SELECT g, NULL::bigint, NULL::text, NULL::text, NULL::bytea FROM state
UNION ALL
SELECT NULL, v.added, v.session, v.digest, v.vec FROM search_vectors v, state
WHERE v.agent = %(agent)s AND v.model = %(model)s AND v.added > %(after)s AND (state.g = %(generation)s OR %(all)s)
"""
"""The agent's generation and, in the same snapshot, its rows of `model` added after `after` (every row when the
generation is not the cached one: `all`, or the caller reads again)."""


@dataclass
class _Cached:
    """One agent's vectors of one model as this process holds them."""

    generation: int
    vectors: VectorCache
    last: int = 0
    keys: list[tuple[str, str]] = field(default_factory=list)  # by cache row id: (session, digest)
    index: dict[tuple[str, str], int] = field(default_factory=dict)


class PostgresVectorStore:
    def __init__(self, database: Database) -> None:
        self.database = database
        self._cache: dict[str, _Cached] = {}
        self._lock = asyncio.Lock()  # one reader refreshes the cache at a time
        self._removed = 0  # removals since the last VACUUM this store made
        self._vacuum = asyncio.Lock()
        self.reads = 0
        """How many rows searches read from the table (a statistic: the cache at work)."""

    async def stored(self, agent: str, session: str) -> dict[str, Stored]:
        async with self.database.connection("read search vectors") as conn:
            cursor = await conn.execute(
                "SELECT digest, kind, model FROM search_vectors WHERE agent = %s AND session = %s", (agent, session)
            )
            rows = await cursor.fetchall()
        return {str(digest): Stored(str(kind), str(model)) for digest, kind, model in rows}

    async def put(self, agent: str, model: str, items: Sequence[tuple[Passage, Vector]]) -> None:
        rows = [
            (agent, p.session, digest_of(p), p.kind, p.seq, p.role, p.speaker, p.ts, p.text, model, _blob(v))
            for p, v in items
        ]
        if not rows:
            return
        async with self.database.connection("store search vectors") as conn, conn.transaction(), conn.cursor() as cur:
            await cur.execute(_LOCK_AGENT, (agent,))
            await cur.executemany(_PUT, rows)

    async def relabel(self, agent: str, session: str, kinds: Mapping[str, str]) -> None:
        if not kinds:
            return
        rows = [(kind, agent, session, digest) for digest, kind in kinds.items()]
        async with self.database.connection("relabel search vectors") as conn, conn.transaction(), conn.cursor() as cur:
            await cur.executemany(
                "UPDATE search_vectors SET kind = %s WHERE agent = %s AND session = %s AND digest = %s", rows
            )

    async def remove(self, agent: str, session: str, digests: Collection[str]) -> None:
        if digests:
            await self._delete(agent, "session = %(session)s AND digest = ANY(%(digests)s)", session, list(digests))

    async def drop_session(self, agent: str, session: str) -> None:
        await self._delete(agent, "session = %(session)s", session, [])

    async def _delete(self, agent: str, where: str, session: str, digests: list[str]) -> None:
        """Delete rows and move the agent's generation in the same statement (only when a row went)."""
        sql = f"WITH gone AS (DELETE FROM search_vectors WHERE agent = %(agent)s AND {where} RETURNING 1) {_REMOVED}"
        async with self.database.connection("remove search vectors") as conn:
            cursor = await conn.execute(sql, {"agent": agent, "session": session, "digests": digests})
            if await cursor.fetchone() is not None:
                self._removed += 1

    async def nearest(
        self, agent: str, model: str, query: Vector, scope: SearchScope, limit: int
    ) -> list[tuple[Passage, float]]:
        async with self._lock:
            cached = await self._refresh(agent, model, query.shape[0])
        allowed = in_scope(scope)
        top = await asyncio.to_thread(cached.vectors.top, query, allowed, limit)
        if not top:
            return []
        keys = [cached.keys[row_id] for row_id, _ in top]
        async with self.database.connection("read search vectors") as conn:
            cursor = await conn.execute(
                "SELECT session, digest, kind, seq, role, speaker, ts, text FROM search_vectors "
                "WHERE agent = %s AND digest = ANY(%s)",
                (agent, [digest for _, digest in keys]),
            )
            found = {(str(r[0]), str(r[1])): r for r in await cursor.fetchall()}
        passages = []
        for key, (_, score) in zip(keys, top, strict=True):
            row = found.get(key)
            if row is not None:  # removed meanwhile: left out
                _, _, kind, seq, role, speaker, ts, text = row
                passages.append((Passage(SourceRef(kind, session=row[0]), seq, role, speaker, ts, text), score))
        return passages

    async def _refresh(self, agent: str, model: str, dims: int) -> _Cached:
        """The agent's cached vectors brought level with the table: the rows added since, or all of them again
        when one was removed or overwritten (by any instance) or the model or width changed."""
        cached = self._cache.get(agent)
        if cached is not None and (cached.vectors.model != model or cached.vectors.dims != dims):
            cached = None
        async with self.database.connection("search vectors") as conn:
            params = {"agent": agent, "model": model, "after": 0, "generation": -1, "all": True}
            if cached is not None:
                params.update(after=cached.last, generation=cached.generation, all=False)
            cursor = await conn.execute(_READ, params)
            rows = await cursor.fetchall()
            generation = int(rows[0][0])
            fresh = [(int(r[1]), str(r[2]), str(r[3]), bytes(r[4])) for r in rows[1:]]
            again = cached is not None and generation != cached.generation
            if cached is not None and (again or any((s, d) in cached.index for _, s, d, _ in fresh)):
                params.update(after=0, generation=-1, all=True)  # something went or was embedded again
                cursor = await conn.execute(_READ, params)
                rows = await cursor.fetchall()
                generation = int(rows[0][0])
                fresh = [(int(r[1]), str(r[2]), str(r[3]), bytes(r[4])) for r in rows[1:]]
                cached = None
        self.reads += len(fresh)
        if cached is None:
            cached = self._cache[agent] = _Cached(generation, VectorCache(model, dims))
        _append(cached, sorted(fresh))
        return cached

    async def purge(self, agent: str) -> None:
        """Deleted rows' old versions reclaimed (a plain VACUUM of the one table) when this store removed any since
        its last VACUUM: one VACUUM for every removal made before it began (a purge waiting for a running one
        VACUUMs again only if removals remain that it did not cover)."""
        if self._removed == 0:
            return
        async with self._vacuum:
            covered = self._removed
            if covered == 0:
                return
            async with self.database.connection("vacuum search vectors") as conn:
                await conn.execute("VACUUM search_vectors")
            self._removed -= covered

    async def close(self) -> None:
        """The pool belongs to the store: nothing of its own to close."""
        self._cache.clear()


def _append(cached: _Cached, rows: Sequence[tuple[int, str, str, bytes]]) -> None:
    added = []
    for added_at, session, digest, blob in rows:
        row_id = len(cached.keys)
        cached.keys.append((session, digest))
        cached.index[session, digest] = row_id
        added.append((row_id, session, blob))
        cached.last = max(cached.last, added_at)
    cached.vectors.add(added)


def _blob(vector: Vector) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()
