"""`PostgresSearchIndex`: the `SearchIndexStore` port on PostgreSQL, in the tables of migrations 7 and 12
(`schema.SEARCH_INDEX`, `schema.SEARCH_CACHES`), shared by every instance. Docs arrive tokenised (storage never
tokenises); every write is one transaction under its source's advisory lock, together with the source's watermark,
and keeps each term's df (`search_terms`). BM25 with the port's prior is summed over the query terms' postings
(`search_rank`: frequent terms' from the instance's memory, `search_cache`); the best few are ordered by the port's
`rank_key` in Python, so both backends give the same order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection, AsyncCursor
from psycopg.rows import TupleRow

from agenthub.storage.postgres.database import Database
from agenthub.storage.postgres.search_cache import PostingsCache
from agenthub.storage.postgres.search_rank import Ranking, best_docs
from agenthub.storage.search_index import (
    ARCHIVE,
    HISTORY,
    MEMORY,
    Passage,
    SearchDoc,
    SearchHit,
    SearchScope,
    SourceRef,
    identity,
    rank_key,
    score_of,
)

Conn = AsyncConnection[TupleRow]
Cursor = AsyncCursor[TupleRow]

PRELOAD = 500_000
"""Postings an instance reads into memory at start, of the most frequent terms (`PostgresSearchIndex.preload`)."""
KEEP_REMOVALS = 1_000
"""Removals logged per agent (`search_removed`): an instance more generations behind reads its postings again."""
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

_SOURCE = "agent = %(agent)s AND kind = %(kind)s AND session = %(session)s AND name = %(name)s"
_SOURCE_LOCK = (
    "SELECT pg_advisory_xact_lock(hashtextextended("
    "'search/' || %(agent)s || '/' || %(kind)s || '/' || %(session)s || '/' || %(name)s, 0))"
)
_DROP_DOCS = f"""
WITH stats AS (
    SELECT packed FROM search_stats WHERE agent = %(agent)s
), gone AS (
    DELETE FROM search_docs WHERE {_SOURCE} AND (%(seqs)s::bigint[] IS NULL OR seq = ANY(%(seqs)s))
    RETURNING id, length, terms
), packed AS MATERIALIZED (
    SELECT g.id, x.term FROM gone g CROSS JOIN LATERAL unnest(g.terms) AS x(term)
    WHERE g.id <= coalesce((SELECT packed FROM stats), 0)
), touched AS MATERIALIZED (
    SELECT b.term, b.first, k.* FROM (SELECT term, array_agg(id) AS ids FROM packed GROUP BY term) t
    JOIN search_blocks b ON b.agent = %(agent)s AND b.term = t.term
        AND EXISTS (SELECT 1 FROM unnest(t.ids) AS i(id) WHERE i.id BETWEEN b.first AND b.last)
    CROSS JOIN LATERAL (
        SELECT array_agg(u.doc ORDER BY u.at) AS docs, array_agg(u.tf ORDER BY u.at) AS tfs,
               array_agg(u.length ORDER BY u.at) AS lengths, array_agg(u.ts ORDER BY u.at) AS ts,
               array_agg(u.source ORDER BY u.at) AS sources
        FROM unnest(b.docs, b.tfs, b.lengths, b.ts, b.sources) WITH ORDINALITY AS u(doc, tf, length, ts, source, at)
        WHERE u.doc != ALL(t.ids)
    ) k
), kept AS (
    UPDATE search_blocks b SET docs = t.docs, tfs = t.tfs, lengths = t.lengths, ts = t.ts, sources = t.sources
    FROM touched t WHERE b.agent = %(agent)s AND b.term = t.term AND b.first = t.first AND t.docs IS NOT NULL
), emptied AS (
    DELETE FROM search_blocks b USING touched t
    WHERE b.agent = %(agent)s AND b.term = t.term AND b.first = t.first AND t.docs IS NULL
), terms AS (
    INSERT INTO search_terms AS s (agent, term, df)
    SELECT %(agent)s, term, -count(*) FROM packed GROUP BY term ORDER BY term
    ON CONFLICT (agent, term) DO UPDATE SET df = s.df + excluded.df
    RETURNING term, df
), moved AS (
    UPDATE search_stats SET generation = generation + 1,
        pending = pending - (SELECT count(*) FROM gone WHERE id > (SELECT packed FROM stats))
    WHERE agent = %(agent)s AND EXISTS (SELECT 1 FROM gone)
    RETURNING generation
), logged AS (
    INSERT INTO search_removed (agent, generation, docs) SELECT %(agent)s, generation, ARRAY(SELECT id FROM gone)
    FROM moved
), pruned AS (
    DELETE FROM search_removed
    WHERE agent = %(agent)s AND generation <= (SELECT generation FROM moved) - {KEEP_REMOVALS}
)
SELECT (SELECT count(*) FROM gone), (SELECT coalesce(sum(length), 0) FROM gone),
       (SELECT coalesce(array_agg(term), '{{}}') FROM terms WHERE df <= 0)
"""
"""The docs deleted; the postings of those already packed taken out of their terms' blocks (a block left empty
deleted) and their terms' df taken down; the agent's generation moved when a doc went, with the ids removed logged
under it (instances take them out of their cached postings); the terms no doc holds any more are returned (deleted
next: their text must not stay). A pending doc's postings are its own row's: they go with it."""
_DROP_TERMS = "DELETE FROM search_terms WHERE agent = %s AND term = ANY(%s) AND df <= 0"
_DROP_NAMES = """
DELETE FROM search_names n WHERE n.agent = %(agent)s AND n.src = %(src)s
    AND NOT EXISTS (SELECT 1 FROM search_docs d WHERE d.agent = %(agent)s AND d.kind != 'memory' AND d.session = n.src)
    AND NOT EXISTS (SELECT 1 FROM search_docs d WHERE d.agent = %(agent)s AND d.kind = 'memory' AND d.name = n.src)
"""
"""The source's names (`search_names`: its code in the blocks) once no doc of it is left: their text must not stay."""
_INSERT = """
INSERT INTO search_docs (agent, kind, session, name, seq, role, speaker, ts, body, length, terms, tfs)
SELECT %(agent)s, kind, session, name, seq, role, speaker, ts, body, length,
       coalesce(string_to_array(doc_terms, E'\\x1f'), '{}'), coalesce(string_to_array(doc_tfs, ',')::int[], '{}')
FROM unnest(%(kinds)b::text[], %(sessions)b::text[], %(names)b::text[], %(seqs)b::bigint[], %(roles)b::text[],
            %(speakers)b::text[], %(ts)b::bigint[], %(bodies)b::text[], %(lengths)b::int[], %(doc_terms)b::text[],
            %(doc_tfs)b::text[])
    AS t(kind, session, name, seq, role, speaker, ts, body, length, doc_terms, doc_tfs)
"""
"""The docs of any number of sources, each with its distinct terms and their counts (its ids drawn now: after the
agent's row was locked), in one statement: pending until the packer puts their postings in blocks (`search_pack`).
The arrays are sent in binary (the driver dumps a list of text ten times faster so)."""
_ADD_STATS = """
INSERT INTO search_stats AS s (agent, docs, total_length, pending)
VALUES (%(agent)s, %(docs)s, %(length)s, %(added)s)
ON CONFLICT (agent) DO UPDATE SET docs = s.docs + EXCLUDED.docs, total_length = s.total_length + EXCLUDED.total_length,
    pending = s.pending + EXCLUDED.pending
RETURNING pending
"""
_SET_WATERMARK = """
INSERT INTO search_sources AS w (agent, kind, session, name, watermark, head)
VALUES (%(agent)s, %(kind)s, %(session)s, %(name)s, %(watermark)s, %(head)s)
ON CONFLICT (agent, kind, session, name) DO UPDATE SET watermark = EXCLUDED.watermark, head = EXCLUDED.head
"""


def source_params(agent: str, source: SourceRef, **more: Any) -> dict[str, Any]:
    return {"agent": agent, "kind": source.kind, "session": source.session, "name": source.name, **more}


async def lock_source(conn: Conn, agent: str, source: SourceRef, *, durable: bool = True) -> None:
    """Serialise this transaction with every other writer of the source (any instance). Not `durable`: only new
    docs are added, with their watermark in the same transaction, so a server crash may lose both together (they
    are indexed again from the history tables) and the commit need not wait for the WAL flush. A write that
    removes text (a rewrite, a redaction, a drop) is durable: once it returns, the text is gone for good."""
    sql = _SOURCE_LOCK if durable else _SOURCE_LOCK + ", set_config('synchronous_commit', 'off', true)"
    await conn.execute(sql, source_params(agent, source))


async def lock_agent(conn: Conn, agent: str, docs: int = 0, length: int = 0) -> None:
    """Take the agent's stats row (moving its N and total length by `docs` and `length`) before any other index row:
    the agent's index writers and its packer commit one at a time from here, so doc ids grow in commit order (an
    instance reads the docs added since it last read by id), a removal never races a pack and no two writers lock
    term rows in opposite orders."""
    await _move_stats(conn, agent, docs, length)


async def _move_stats(conn: Conn, agent: str, docs: int, length: int, added: int = 0) -> Cursor:
    """`lock_agent`, its pending docs moved by `added` too; the cursor of the pending docs after it (not read: in a
    pipeline, reading it waits for the server)."""
    return await conn.execute(_ADD_STATS, {"agent": agent, "docs": docs, "length": length, "added": added})


async def pending_after(cursor: Cursor | None) -> int | None:
    """The agent's pending docs after an `insert_batch` (None: it wrote nothing)."""
    row = None if cursor is None else await cursor.fetchone()
    return None if row is None else int(row[0])


async def drop_docs(conn: Conn, agent: str, source: SourceRef, seqs: Sequence[int] | None = None) -> tuple[int, int]:
    """Delete the source's docs (only those at `seqs`, when given) and their postings; (docs, total length)."""
    await lock_agent(conn, agent)
    cursor = await conn.execute(_DROP_DOCS, source_params(agent, source, seqs=None if seqs is None else list(seqs)))
    row = await cursor.fetchone()
    if row is None:
        return (0, 0)
    if row[2]:
        await conn.execute(_DROP_TERMS, (agent, list(row[2])))
    if row[0]:
        src = source.name if source.kind == MEMORY else source.session
        await conn.execute(_DROP_NAMES, {"agent": agent, "src": src})
    return (int(row[0]), int(row[1]))


async def insert_docs(
    conn: Conn, agent: str, source: SourceRef, docs: Sequence[SearchDoc], dropped: tuple[int, int] = (0, 0)
) -> None:
    """Store `docs`, and move the agent's N and total length by what was added and dropped (`insert_batch`)."""
    await insert_batch(conn, agent, [(source, docs)], dropped)


async def insert_batch(
    conn: Conn,
    agent: str,
    batch: Sequence[tuple[SourceRef, Sequence[SearchDoc]]],
    dropped: tuple[int, int] = (0, 0),
) -> Cursor | None:
    """Store the docs of every source of `batch` in one statement (pending: the packer puts their postings in
    blocks), and move the agent's N and total length by what was added and dropped (its stats row taken first);
    the cursor of the agent's pending docs then (`pending_after`; None: nothing was written)."""
    added = sum(len(docs) for _, docs in batch)
    added_length = sum(len(doc.terms) for _, docs in batch for doc in docs)
    if not added and dropped == (0, 0):
        return None
    counted = await _move_stats(conn, agent, added - dropped[0], added_length - dropped[1], added)
    if added:
        await conn.execute(_INSERT, {"agent": agent, **_columns(batch)})
    return counted


def _columns(batch: Sequence[tuple[SourceRef, Sequence[SearchDoc]]]) -> dict[str, list[Any]]:
    """The batch as the arrays `_INSERT` takes: a doc's distinct terms joined by `_TERM_SEP`, their counts by ","."""
    cols: dict[str, list[Any]] = {c: [] for c in _COLUMNS}
    for source, docs in batch:
        for doc in docs:
            p = doc.passage
            for name, value in zip(
                _DOC_COLUMNS,
                (source.kind, source.session, source.name, p.seq, p.role, p.speaker, p.ts, p.text, len(doc.terms)),
                strict=True,
            ):  # fmt: skip
                cols[name].append(value)
            counts = _counts(doc.terms)
            cols["doc_terms"].append(_TERM_SEP.join(counts) if counts else None)
            cols["doc_tfs"].append(",".join(map(str, counts.values())) if counts else None)
    return cols


_DOC_COLUMNS = ("kinds", "sessions", "names", "seqs", "roles", "speakers", "ts", "bodies", "lengths")
_COLUMNS = (*_DOC_COLUMNS, "doc_terms", "doc_tfs")
_TERM_SEP = "\x1f"
"""Between a doc's distinct terms as sent (no term holds it), split into `search_docs.terms` by the server."""


async def set_watermark(conn: Conn, agent: str, source: SourceRef, watermark: str, head: str | None = None) -> None:
    await conn.execute(_SET_WATERMARK, source_params(agent, source, watermark=watermark, head=head))


def _counts(terms: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for term in terms:
        counts[term] = counts.get(term, 0) + 1
    return counts


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
            await conn.execute(f"DELETE FROM search_sources WHERE {_SOURCE}", source_params(agent, source))

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
