"""`search_vectors`: the PostgreSQL `VectorStore`, shared by every instance (what one embeds, every one finds).
Nearest neighbours by brute force: the scope's vectors fetched, the dot products on a worker thread."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence

import numpy as np

from agenthub.storage.postgres.database import Database
from agenthub.storage.search_index import Passage, SearchScope, SourceRef
from agenthub.storage.search_vectors import Stored, Vector, best, digest_of, in_scope

_PUT = (
    "INSERT INTO search_vectors (agent, session, digest, kind, seq, role, speaker, ts, text, model, vec) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (agent, session, digest) DO UPDATE SET "
    "kind = excluded.kind, seq = excluded.seq, model = excluded.model, vec = excluded.vec"
)


class PostgresVectorStore:
    def __init__(self, database: Database) -> None:
        self.database = database

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
        if not digests:
            return
        async with self.database.connection("remove search vectors") as conn:
            await conn.execute(
                "DELETE FROM search_vectors WHERE agent = %s AND session = %s AND digest = ANY(%s)",
                (agent, session, list(digests)),
            )

    async def drop_session(self, agent: str, session: str) -> None:
        async with self.database.connection("drop search vectors") as conn:
            await conn.execute("DELETE FROM search_vectors WHERE agent = %s AND session = %s", (agent, session))

    async def nearest(
        self, agent: str, model: str, query: Vector, scope: SearchScope, limit: int
    ) -> list[tuple[Passage, float]]:
        async with self.database.connection("search vectors") as conn:
            if scope.session is not None:
                cursor = await conn.execute(
                    "SELECT session, digest, vec FROM search_vectors WHERE agent = %s AND model = %s AND session = %s",
                    (agent, model, scope.session),
                )
            else:
                cursor = await conn.execute(
                    "SELECT session, digest, vec FROM search_vectors WHERE agent = %s AND model = %s", (agent, model)
                )
            rows = await cursor.fetchall()
        allowed = in_scope(scope)
        keys = [(str(session), str(digest)) for session, digest, _ in rows]
        candidates = [(i, bytes(row[2])) for i, row in enumerate(rows) if allowed(keys[i][0])]
        top = await asyncio.to_thread(best, candidates, query, limit)
        if not top:
            return []
        async with self.database.connection("read search vectors") as conn:
            cursor = await conn.execute(
                "SELECT session, digest, kind, seq, role, speaker, ts, text FROM search_vectors "
                "WHERE agent = %s AND digest = ANY(%s)",
                (agent, [keys[i][1] for i, _ in top]),
            )
            found = {(str(r[0]), str(r[1])): r for r in await cursor.fetchall()}
        passages = []
        for i, score in top:
            row = found.get(keys[i])
            if row is not None:  # removed meanwhile: left out
                _, _, kind, seq, role, speaker, ts, text = row
                passages.append((Passage(SourceRef(kind, session=row[0]), seq, role, speaker, ts, text), score))
        return passages

    async def purge(self, agent: str) -> None:
        """Deleted rows' old versions are reclaimed at once (a plain VACUUM of the one table)."""
        async with self.database.connection("vacuum search vectors") as conn:
            await conn.execute("VACUUM search_vectors")

    async def close(self) -> None:
        """The pool belongs to the store: nothing of its own to close."""


def _blob(vector: Vector) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()
