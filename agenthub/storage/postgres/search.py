"""`PostgresSearchIndex`: the `SearchIndexStore` port on PostgreSQL, in the tables of migrations 7 and 12
(`schema.SEARCH_INDEX`, `schema.SEARCH_CACHES`), shared by every instance. Docs arrive tokenised (storage never
tokenises); every write is one transaction under its source's advisory lock, together with the source's watermark,
and keeps each term's df (`search_terms`). BM25 with the port's prior is summed over the query terms' postings
(`search_rank`: frequent terms' from the instance's memory, `search_cache`); the best few are ordered by the port's
`rank_key` in Python, so both backends give the same order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agenthub.storage.postgres.database import Database
from agenthub.storage.postgres.search_cache import PostingsCache
from agenthub.storage.postgres.search_rank import Ranking, best_docs
from agenthub.storage.postgres.search_writes import (
    Conn,
    drop_docs,
    drop_watermark,
    insert_docs,
    lock_agent,
    lock_source,
    set_watermark,
)
from agenthub.storage.search_index import (
    ARCHIVE,
    HISTORY,
    Passage,
    SearchDoc,
    SearchHit,
    SearchScope,
    SourceRef,
    identity,
    rank_key,
    score_of,
)

PRELOAD = 500_000
"""Postings an instance reads into memory at start, of the most frequent terms (`PostgresSearchIndex.preload`)."""
SESSION_DOCS = 5_000
"""A one-session search of a session with at most this many docs looks their postings up by doc id; a longer
session is searched like many sessions, its own postings kept (`search_rank`)."""

_ASKING = """
SELECT set_config('jit', 'off', true),
       coalesce((SELECT docs FROM search_stats WHERE agent = %(agent)s), 0),
       coalesce((SELECT total_length FROM search_stats WHERE agent = %(agent)s), 0),
       (SELECT min(ts) FROM search_docs WHERE agent = %(agent)s),
       (SELECT max(ts) FROM search_docs WHERE agent = %(agent)s),
       coalesce((SELECT generation FROM search_stats WHERE agent = %(agent)s), 0),
       CASE WHEN %(everywhere)s THEN ARRAY(
           SELECT DISTINCT split_part(session, ':', 2) FROM search_sources WHERE agent = %(agent)s AND kind != 'memory'
       ) END,
       (SELECT json_object_agg(term, df) FROM (
            SELECT term, sum(df) AS df FROM (
                SELECT term, df FROM search_terms WHERE agent = %(agent)s AND term = ANY(%(terms)s::text[])
                UNION ALL
                SELECT u.term, 1 FROM search_docs d CROSS JOIN LATERAL unnest(d.terms) AS u(term)
                WHERE d.agent = %(agent)s AND d.id > (SELECT packed FROM search_stats WHERE agent = %(agent)s)
                    AND d.terms && %(terms)s::text[] AND u.term = ANY(%(terms)s::text[])
            ) counted GROUP BY term HAVING sum(df) > 0
        ) dfs),
       CASE WHEN NOT %(everywhere)s THEN (
           SELECT count(*) FROM search_docs
           WHERE agent = %(agent)s AND kind IN ('history', 'archive') AND session = %(session)s
       ) END,
       coalesce((SELECT packed FROM search_stats WHERE agent = %(agent)s), 0)
"""
"""What a search ranks with, in one round trip: N, the total length, the ts span, the generation of the agent's docs;
the query terms' df (their packed docs' and their pending docs'); the channels the agent has sessions on when the
scope is not one session, else that session's doc count; the last packed doc id (jit off: compiling costs more
than these short queries run)."""

_FREQUENT = """
SELECT coalesce((SELECT generation FROM search_stats WHERE agent = %(agent)s), 0),
       coalesce((SELECT packed FROM search_stats WHERE agent = %(agent)s), 0), ARRAY(
    SELECT term FROM (
        SELECT term, sum(df) OVER (ORDER BY df DESC, term) AS upto FROM search_terms
        WHERE agent = %(agent)s AND df >= %(least)s
    ) t WHERE upto <= %(most)s ORDER BY upto
)
"""
"""The agent's generation and last packed doc id, and its most frequent cached terms, as many as hold `most` postings
together."""

_DOC = "d.id, d.kind, d.session, d.name, d.seq, d.role, d.speaker, d.ts, d.body"
_DOC_X = _DOC.replace("d.", "x.")
_AROUND = f"""
SELECT h.id, {_DOC_X}, b.*, a.* FROM unnest(%(ids)s::bigint[]) AS h(id)
JOIN search_docs x ON x.id = h.id
LEFT JOIN LATERAL (
    SELECT {_DOC} FROM search_docs d WHERE d.agent = x.agent AND d.kind = x.kind AND d.session = x.session
    AND d.name = x.name AND d.seq < x.seq ORDER BY d.seq DESC LIMIT 1
) b ON true
LEFT JOIN LATERAL (
    SELECT {_DOC} FROM search_docs d WHERE d.agent = x.agent AND d.kind = x.kind AND d.session = x.session
    AND d.name = x.name AND d.seq > x.seq ORDER BY d.seq LIMIT 1
) a ON true
"""

_NEWEST = """
SELECT max((SELECT ts FROM search_docs d WHERE d.agent = s.agent AND d.kind = s.kind AND d.session = s.session
            AND d.name = s.name ORDER BY d.seq DESC LIMIT 1))
FROM search_sources s
WHERE s.agent = %(agent)s AND s.kind IN ('history', 'archive') AND s.name = '' AND {shown}
"""
"""The time of the newest message of a session or of the sessions of some channels: the last record of each one's
history and archive."""

_IN_CHANNELS = "split_part(s.session, ':', 2) = ANY(%(channels)s::text[])"
_CHANNELS = "SELECT DISTINCT split_part(session, ':', 2) FROM search_sources WHERE agent = %s AND kind != 'memory'"


class PostgresSearchIndex:
    """The shared index: the port's writes and its ranked search."""

    def __init__(
        self,
        database: Database,
        *,
        cache: PostingsCache | None = None,
        session_docs: int = SESSION_DOCS,
        prune: bool = True,
    ) -> None:
        self.database = database
        self.session_docs = session_docs
        self.prune = prune
        """Max-score pruning of the ranking in memory (`search_prune`; False: every posting scored, to compare)."""
        self.cache = cache or PostingsCache()
        """Frequent terms' postings held by this instance (`search_cache`)."""

    # ---- the port: writing ---------------------------------------------------------------------

    async def add(self, agent: str, source: SourceRef, docs: Sequence[SearchDoc], watermark: str) -> None:
        async with self.database.connection("update the search index") as conn, conn.transaction():
            await lock_source(conn, agent, source)
            dropped = await drop_docs(conn, agent, source, [doc.passage.seq for doc in docs]) if docs else (0, 0)
            await insert_docs(conn, agent, source, docs, dropped)
            await set_watermark(conn, agent, source, watermark)

    async def replace_source(self, agent: str, source: SourceRef, docs: Sequence[SearchDoc], watermark: str) -> None:
        async with self.database.connection("update the search index") as conn, conn.transaction():
            await lock_source(conn, agent, source)
            await insert_docs(conn, agent, source, docs, await drop_docs(conn, agent, source))
            await set_watermark(conn, agent, source, watermark)

    async def drop_source(self, agent: str, source: SourceRef) -> None:
        async with self.database.connection("update the search index") as conn, conn.transaction():
            await lock_source(conn, agent, source)
            await insert_docs(conn, agent, source, [], await drop_docs(conn, agent, source))
            await drop_watermark(conn, agent, source)

    async def drop_session(self, agent: str, session: str) -> None:
        for kind in (HISTORY, ARCHIVE):
            await self.drop_source(agent, SourceRef(kind, session))

    async def watermarks(self, agent: str) -> dict[SourceRef, str]:
        async with self.database.connection("read the search index") as conn:
            cursor = await conn.execute(
                "SELECT kind, session, name, watermark FROM search_sources WHERE agent = %s", (agent,)
            )
            rows = await cursor.fetchall()
        return {SourceRef(row[0], row[1], row[2]): row[3] for row in rows}

    async def purge(self, agent: str) -> None:
        """Nothing to do: a dropped or replaced doc's rows are deleted in the same transaction (no copy is kept
        outside the tables; the server reclaims the dead row versions by itself)."""

    async def drop_agent(self, agent: str) -> None:
        """Everything indexed of `agent` (a rebuild starts here)."""
        async with self.database.connection("clear the search index") as conn, conn.transaction():
            await lock_agent(conn, agent)
            tables = (
                "search_blocks",
                "search_docs",
                "search_sources",
                "search_terms",
                "search_removed",
                "search_names",
            )
            for table in tables:
                await conn.execute(f"DELETE FROM {table} WHERE agent = %s", (agent,))
            # its generation moves on, no removal logged under it: every instance reads its postings again
            await conn.execute(
                "UPDATE search_stats SET docs = 0, total_length = 0, pending = 0, generation = generation + 1 "
                "WHERE agent = %s",
                (agent,),
            )

    # ---- the port: asking ----------------------------------------------------------------------

    async def search(self, agent: str, terms: Sequence[str], scope: SearchScope, limit: int) -> list[SearchHit]:
        if not terms or limit < 1:
            return []
        distinct = list(dict.fromkeys(terms))
        # pipelined: the statements are sent as they come, the client waits only for a result it reads
        async with self.database.connection("search the memory") as conn, conn.pipeline(), conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # one snapshot for every read
            cursor = await conn.execute(
                _ASKING,
                {"agent": agent, "everywhere": scope.session is None, "session": scope.session, "terms": distinct},
            )
            row = await cursor.fetchone()
            assert row is not None
            n_docs, n_terms, ts_min, ts_max = int(row[1]), int(row[2]), row[3], row[4]
            sources, channels = _allowed(scope, row[6] or [])
            if n_docs <= 0 or (not sources and not channels):
                return []
            by_id = scope.session if row[8] is not None and row[8] <= self.session_docs else None
            ranking = Ranking(n_docs, n_terms / n_docs, ts_min, ts_max, sources, channels, by_id, self.prune)
            found = row[7] or {}
            dfs = {t: int(found[t]) for t in distinct if t in found}
            bm25 = await best_docs(conn, agent, dfs, ranking, 2 * limit, self.cache, (int(row[5]), int(row[9])))
            if not bm25:
                return []
            passages, around = await _passages_around(conn, list(bm25))
            scored = {i: score_of(bm25[i], p.ts, ts_min, ts_max) for i, p in passages.items()}
            best = _distinct(sorted(passages, key=lambda i: rank_key(scored[i], passages[i])), passages, limit)
        return [SearchHit(passages[i], scored[i], *around.get(i, (None, None))) for i in best]

    async def newest(self, agent: str, scope: SearchScope) -> int | None:
        """As the files' `newest`: the time of the newest message the scope shows (the last record of the history or
        the archive of each of its sessions: one, or every session of a channel it accepts)."""
        async with self.database.connection("search the memory") as conn:
            channels: list[str] = []
            if scope.session is None:
                cursor = await conn.execute(_CHANNELS, (agent,))
                channels = [c for (c,) in await cursor.fetchall() if c and scope.agent_scoped(c)]
                if not channels:
                    return None
            shown = "s.session = %(session)s" if scope.session is not None else _IN_CHANNELS
            query = _NEWEST.format(shown=shown)
            cursor = await conn.execute(query, {"agent": agent, "session": scope.session, "channels": channels})
            row = await cursor.fetchone()
        return None if row is None or row[0] is None else int(row[0])

    async def preload(self, agent: str, postings: int = PRELOAD) -> int:
        """Read the agent's most frequent terms' postings into this instance's memory, up to about `postings` of
        them (at start: a first search of a common word then finds them there); how many terms."""
        async with self.database.connection("read the search index") as conn, conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # the generation and postings agree
            cursor = await conn.execute(
                _FREQUENT, {"agent": agent, "least": self.cache.cached_df, "most": min(postings, self.cache.budget)}
            )
            row = await cursor.fetchone()
            assert row is not None
            terms = list(row[2])
            if terms:
                await self.cache.postings(conn, agent, int(row[0]), terms, int(row[1]))
        return len(terms)

    async def stats(self, agent: str) -> dict[str, int]:
        async with self.database.connection("read the search index") as conn:
            cursor = await conn.execute(
                "SELECT coalesce((SELECT docs FROM search_stats WHERE agent = %(a)s), 0), "
                "coalesce((SELECT total_length FROM search_stats WHERE agent = %(a)s), 0), "
                "(SELECT count(*) FROM search_sources WHERE agent = %(a)s)",
                {"a": agent},
            )
            row = await cursor.fetchone()
        assert row is not None
        return {"docs": int(row[0]), "terms": int(row[1]), "sources": int(row[2])}


def _allowed(scope: SearchScope, channels: Sequence[str]) -> tuple[list[str], list[str]]:
    """The scope as the postings see it: the sources (a session; memory names) and the channels it may read."""
    sources = list(scope.memory_names)
    if scope.session is not None:
        return [scope.session, *sources], []
    return sources, [c for c in channels if c and scope.agent_scoped(c)]


async def _passages_around(
    conn: Conn, ids: list[int]
) -> tuple[dict[int, Passage], dict[int, tuple[Passage | None, Passage | None]]]:
    """The docs' passages, and each one's neighbours in its source (the greatest seq below it and the smallest
    above), in one round trip: the neighbours of every candidate, not only of the few shown (a few index lookups
    each cost less than waiting for the server again)."""
    cursor = await conn.execute(_AROUND, {"ids": ids})
    passages: dict[int, Passage] = {}
    around: dict[int, tuple[Passage | None, Passage | None]] = {}
    width = 9
    for row in await cursor.fetchall():
        doc, before, after = row[1 : 1 + width], row[1 + width : 1 + 2 * width], row[1 + 2 * width :]
        passages[int(row[0])] = _passage(doc[1:])
        around[int(row[0])] = (
            None if before[0] is None else _passage(before[1:]),
            None if after[0] is None else _passage(after[1:]),
        )
    return passages, around


def _passage(row: Sequence[Any]) -> Passage:
    kind, session, name, seq, role, speaker, ts, body = row
    return Passage(SourceRef(kind, session, name), int(seq), role, speaker, None if ts is None else int(ts), body)


def _distinct(ranked: list[int], passages: dict[int, Passage], limit: int) -> list[int]:
    """The first `limit` of `ranked`, one per message (the same message in the archive and the history)."""
    best: list[int] = []
    seen: set[tuple[str, str, int | None, str]] = set()
    for doc_id in ranked:
        key = identity(passages[doc_id])
        if key not in seen:
            seen.add(key)
            best.append(doc_id)
            if len(best) == limit:
                break
    return best
