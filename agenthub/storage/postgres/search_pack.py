"""Packing the shared index's pending docs: their postings written as one block per term (parallel arrays in doc
order) and their terms' df counted, in one transaction under the agent's stats row (the lock every index writer
takes first), so a removal never races a pack and a pack cut short (a crash, a kill) leaves every doc pending, as
before it. A write stores only its docs (`search.insert_batch`); a search reads the blocks and the pending docs in
one snapshot (`search_cache.POSTINGS`), so what it finds is the same before, during and after a pack."""

from __future__ import annotations

from agenthub.storage.postgres.database import Database
from agenthub.storage.postgres.search_cache import DOC_CHANNEL, DOC_SRC
from agenthub.storage.postgres.search_writes import Conn, lock_agent

PACK_AT = 2_000
"""An agent's pending docs at which its instance packs them (a search reads every pending doc holding a query term)."""
PACK_MOST = 20_000
"""Docs packed in one transaction at most (the agent's index writers wait for it)."""

_PACK = f"""
WITH d AS MATERIALIZED (
    SELECT d.id, d.length, d.ts, {DOC_SRC} AS src, {DOC_CHANNEL} AS channel, d.terms, d.tfs FROM search_docs d
    WHERE d.agent = %(agent)s AND d.id > (SELECT packed FROM search_stats WHERE agent = %(agent)s)
    ORDER BY d.id LIMIT %(most)s
), named AS MATERIALIZED (
    SELECT DISTINCT src, channel FROM d
), known AS MATERIALIZED (
    SELECT n.code, n.src, n.channel FROM search_names n JOIN named USING (src, channel) WHERE n.agent = %(agent)s
), added AS (
    INSERT INTO search_names (agent, code, src, channel)
    SELECT %(agent)s, coalesce((SELECT max(code) FROM search_names WHERE agent = %(agent)s), 0)
           + row_number() OVER (ORDER BY src, channel), src, channel
    FROM named WHERE NOT EXISTS (SELECT 1 FROM known k WHERE k.src = named.src AND k.channel = named.channel)
    RETURNING code, src, channel
), codes AS (
    SELECT code, src, channel FROM known UNION ALL SELECT code, src, channel FROM added
), blocks AS (
    INSERT INTO search_blocks (agent, term, first, last, docs, tfs, lengths, ts, sources)
    SELECT %(agent)s, u.term, min(d.id), max(d.id), array_agg(d.id), array_agg(u.tf), array_agg(d.length),
           array_agg(d.ts), array_agg(c.code)
    FROM d JOIN codes c USING (src, channel) CROSS JOIN LATERAL unnest(d.terms, d.tfs) AS u(term, tf) GROUP BY u.term
    RETURNING term, cardinality(docs) AS df
), terms AS (
    INSERT INTO search_terms AS s (agent, term, df)
    SELECT %(agent)s, term, df FROM blocks ORDER BY term
    ON CONFLICT (agent, term) DO UPDATE SET df = s.df + excluded.df
), moved AS (
    UPDATE search_stats SET packed = (SELECT max(id) FROM d), pending = greatest(pending - (SELECT count(*) FROM d), 0)
    WHERE agent = %(agent)s AND EXISTS (SELECT 1 FROM d)
)
SELECT count(*) FROM d
"""
"""The agent's oldest pending docs (at most `most`) packed: one block per term (its arrays aligned, in no particular
doc order; each posting's source and channel as the agent's code for them, new ones numbered in `search_names`),
the terms' df moved, the agent's `packed` id moved past them; how many were packed."""


async def pack(conn: Conn, agent: str, most: int = PACK_MOST) -> int:
    """Pack the agent's oldest pending docs in the caller's transaction; how many (fewer than `most`: none left)."""
    await lock_agent(conn, agent)
    await conn.execute("SELECT set_config('work_mem', '64MB', true)")  # the postings sorted by term in memory
    cursor = await conn.execute(_PACK, {"agent": agent, "most": most})
    row = await cursor.fetchone()
    return 0 if row is None else int(row[0])


async def pack_pending(database: Database, agent: str, most: int = PACK_MOST) -> int:
    """Pack the agent's oldest pending docs in a transaction of their own; how many."""
    async with database.connection("pack the search index") as conn, conn.transaction():
        return await pack(conn, agent, most)
