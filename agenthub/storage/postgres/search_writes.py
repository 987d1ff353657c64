"""The search index's writes every writer shares (port, sync, catch-up, packer): docs in and out, and watermarks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection, AsyncCursor
from psycopg.rows import TupleRow

from agenthub.storage.search_index import MEMORY, SearchDoc, SourceRef

Conn = AsyncConnection[TupleRow]
Cursor = AsyncCursor[TupleRow]

KEEP_REMOVALS = 1_000
"""Removals logged per agent (`search_removed`): an instance more generations behind reads its postings again."""

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


async def drop_watermark(conn: Conn, agent: str, source: SourceRef) -> None:
    """The source's watermark gone with it (its docs dropped in the same transaction)."""
    await conn.execute(f"DELETE FROM search_sources WHERE {_SOURCE}", source_params(agent, source))


def _counts(terms: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for term in terms:
        counts[term] = counts.get(term, 0) + 1
    return counts
