"""The PostgreSQL packer alone: µs per doc packed into per-term blocks, blocks naming each posting's source and
channel by code (migration 24, the product) vs by their two texts (the packing of migrations 21-23), same docs, one
server, packs asked alternately.

Run: PYTHONPATH=. .venv/bin/python bench/bench_search_pack.py [--rounds 8] [--docs 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections import Counter

import psycopg
from _search_corpus import sentence

from agenthub.search.text import query_terms
from agenthub.storage.postgres.schema import MIGRATIONS
from agenthub.storage.postgres.search_cache import DOC_CHANNEL, DOC_SRC
from agenthub.storage.postgres.search_pack import pack
from tests.support.postgres import migrated, new_server

AGENT = "bench"
TEXT_PACK = f"""
WITH d AS MATERIALIZED (
    SELECT d.id, d.length, d.ts, {DOC_SRC} AS src, {DOC_CHANNEL} AS channel, d.terms, d.tfs FROM search_docs d
    WHERE d.agent = %(agent)s AND d.id > (SELECT packed FROM search_stats WHERE agent = %(agent)s) ORDER BY d.id
), blocks AS (
    INSERT INTO search_blocks (agent, term, first, last, docs, tfs, lengths, ts, srcs, channels)
    SELECT %(agent)s, u.term, min(d.id), max(d.id), array_agg(d.id), array_agg(u.tf), array_agg(d.length),
           array_agg(d.ts), array_agg(d.src), array_agg(d.channel)
    FROM d CROSS JOIN LATERAL unnest(d.terms, d.tfs) AS u(term, tf) GROUP BY u.term
    RETURNING term, cardinality(docs) AS df
), terms AS (
    INSERT INTO search_terms AS s (agent, term, df) SELECT %(agent)s, term, df FROM blocks ORDER BY term
    ON CONFLICT (agent, term) DO UPDATE SET df = s.df + excluded.df
), moved AS (
    UPDATE search_stats SET packed = (SELECT max(id) FROM d), pending = 0 WHERE agent = %(agent)s
)
SELECT count(*) FROM d
"""
"""The packing before migration 24 (each posting's source and channel as text), to compare."""
_DOCS = """
INSERT INTO search_docs (agent, kind, session, name, seq, role, ts, body, length, terms, tfs)
SELECT %(agent)s, 'history', s, '', q, 'user', t, b, l, string_to_array(x, E'\\x1f'), string_to_array(f, ',')::int[]
FROM unnest(%(s)s::text[], %(q)s::bigint[], %(t)s::bigint[], %(b)s::text[], %(l)s::int[], %(x)s::text[],
            %(f)s::text[]) AS u(s, q, t, b, l, x, f)
"""


def _docs(rng: random.Random, start: int, count: int) -> dict[str, object]:
    rows: dict[str, list[object]] = {k: [] for k in "sqtblxf"}
    for i in range(start, start + count):
        body = sentence(rng, i)
        counts = Counter(query_terms(body))
        for key, value in zip(
            "sqtblxf",
            (f"{AGENT}:wecom:group-{i % 300}", i, 1_700_000_000_000 + i, body, sum(counts.values()),
             "\x1f".join(counts), ",".join(map(str, counts.values()))),
            strict=True,
        ):  # fmt: skip
            rows[key].append(value)
    return {"agent": AGENT, **rows}


async def _schema(dsn: str, upto: int) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for migration in MIGRATIONS:
            if migration.version <= upto:
                for statement in migration.sql:
                    await conn.execute(statement)
        await conn.execute("INSERT INTO search_stats (agent, docs, total_length) VALUES (%s, 0, 0)", (AGENT,))


async def _round(dsn: str, docs: dict[str, object], coded: bool) -> float:
    """Seconds per doc of one pack of `docs` (stored first, then packed in a transaction of its own)."""
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        async with conn.transaction():
            await conn.execute(_DOCS, docs)
        start = time.perf_counter()
        async with conn.transaction():
            if coded:
                packed = await pack(conn, AGENT)
            else:
                await conn.execute("SELECT set_config('work_mem', '64MB', true)")
                cursor = await conn.execute(TEXT_PACK, {"agent": AGENT})
                row = await cursor.fetchone()
                packed = int(row[0]) if row else 0
        return (time.perf_counter() - start) / max(packed, 1)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--docs", type=int, default=2000)
    args = parser.parse_args()
    server = new_server(durable=True)
    try:
        text_dsn, coded_dsn = server.create_database(), migrated(server.create_database())
        await _schema(text_dsn, 23)
        await _schema(coded_dsn, 0)  # migrated already: only its stats row
        rng = random.Random(3)
        text: list[float] = []
        coded: list[float] = []
        for r in range(args.rounds):
            docs = _docs(rng, r * args.docs, args.docs)
            for dsn, is_coded, times in ((text_dsn, False, text), (coded_dsn, True, coded))[:: 1 if r % 2 else -1]:
                times.append(await _round(dsn, docs, is_coded))
        t, c = statistics.median(text) * 1e6, statistics.median(coded) * 1e6
        print(f"pack of {args.docs} docs, median of {args.rounds}: text per posting {t:.0f} us/doc, "
              f"codes {c:.0f} us/doc (ratio {c / t:.2f})")  # fmt: skip
    finally:
        server.remove()


if __name__ == "__main__":
    asyncio.run(main())
