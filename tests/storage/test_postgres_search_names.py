"""Migration 24: the blocks packed before it get their postings' source and channel codes (a search finds the same
docs, in the same scopes), the blocks packed after it use the same codes, and removing a source leaves no name."""

from __future__ import annotations

import psycopg

from agenthub.storage.postgres import Database
from agenthub.storage.postgres.schema import MIGRATIONS, apply_migrations
from agenthub.storage.postgres.search import PostgresSearchIndex
from agenthub.storage.postgres.search_cache import DOC_CHANNEL, DOC_SRC, PostingsCache
from agenthub.storage.postgres.search_pack import pack_pending
from agenthub.storage.search_index import MEMORY, Passage, SearchDoc, SearchScope, SourceRef, history_source
from tests.support.postgres import rows_holding

X, Y = "a:http:xylophone", "a:wecom:yodel"
TODO = SourceRef(MEMORY, "", "todo.md")
DOCS = [  # (kind, session, name, seq, terms)
    ("history", X, "", 1, ["apple", "pear"]),
    ("history", X, "", 2, ["apple"]),
    ("history", Y, "", 1, ["apple", "plum"]),
    ("memory", "", "notes.md", 1, ["apple", "pear", "plum"]),
]
_OLD_PACK = f"""
INSERT INTO search_blocks (agent, term, first, last, docs, tfs, lengths, ts, srcs, channels)
SELECT 'a', u.term, min(d.id), max(d.id), array_agg(d.id), array_agg(u.tf), array_agg(d.length), array_agg(d.ts),
       array_agg({DOC_SRC}), array_agg({DOC_CHANNEL})
FROM search_docs d CROSS JOIN LATERAL unnest(d.terms, d.tfs) AS u(term, tf) GROUP BY u.term
"""
"""How migration 21 packed: each posting's source and channel as text."""


async def _at_version_23_packed(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
    await conn.execute(
        "CREATE TABLE schema_version (version integer PRIMARY KEY, what text NOT NULL, "
        "applied_at timestamptz NOT NULL DEFAULT now())"
    )
    for migration in MIGRATIONS:
        if migration.version <= 23:
            for statement in migration.sql:
                await conn.execute(statement)
            await conn.execute("INSERT INTO schema_version VALUES (%s, %s)", (migration.version, migration.what))
    for at, (kind, session, name, seq, terms) in enumerate(DOCS, 1):
        await conn.execute(
            "INSERT INTO search_docs (id, agent, kind, session, name, seq, role, ts, body, length, terms, tfs) "
            "VALUES (%s, 'a', %s, %s, %s, %s, 'user', %s, %s, %s, %s, %s)",
            (at, kind, session, name, seq, 1000 + at, " ".join(terms), len(terms), terms, [1] * len(terms)),
        )
        await conn.execute(
            "INSERT INTO search_sources VALUES ('a', %s, %s, %s, 'mark', NULL) ON CONFLICT DO NOTHING",
            (kind, session, name),
        )
    await conn.execute("SELECT setval('search_docs_id_seq', %s)", (len(DOCS),))
    await conn.execute(_OLD_PACK)
    await conn.execute("INSERT INTO search_terms SELECT agent, term, cardinality(docs) FROM search_blocks")
    await conn.execute(
        "INSERT INTO search_stats (agent, docs, total_length, packed) VALUES ('a', %s, 9, %s)", (len(DOCS), len(DOCS))
    )


def _shown(hits: list) -> list[tuple[str, str, int]]:  # type: ignore[type-arg]
    return sorted((h.passage.source.session, h.passage.source.name, h.passage.seq) for h in hits)


async def test_blocks_packed_before_migration_24_are_coded_and_found_and_a_removal_leaves_no_name(
    postgres_dsn: str,
) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        await _at_version_23_packed(conn)
        assert 24 in await apply_migrations(conn)
        cursor = await conn.execute("SELECT code, src, channel FROM search_names WHERE agent = 'a' ORDER BY code")
        named = await cursor.fetchall()
        assert [code for code, _, _ in named] == [1, 2, 3]
        assert sorted((src, channel) for _, src, channel in named) == [(X, "http"), (Y, "wecom"), ("notes.md", "")]
    database = Database(postgres_dsn)
    every = SearchScope(None, ("notes.md", "todo.md"), agent_scoped=lambda _: True)
    for cached_df in (1, 10**9):  # from the instance's memory and from the table
        index = PostgresSearchIndex(database, cache=PostingsCache(cached_df=cached_df))
        assert _shown(await index.search("a", ["apple"], every, 10)) == [
            ("", "notes.md", 1), (X, "", 1), (X, "", 2), (Y, "", 1),
        ]  # fmt: skip
        only_x = SearchScope(X, agent_scoped=lambda _: False)
        assert _shown(await index.search("a", ["plum", "pear"], only_x, 10)) == [(X, "", 1)]
        http = SearchScope(None, agent_scoped=lambda channel: channel == "http")
        assert _shown(await index.search("a", ["plum"], http, 10)) == []
        wecom = SearchScope(None, agent_scoped=lambda channel: channel == "wecom")
        assert _shown(await index.search("a", ["plum"], wecom, 10)) == [(Y, "", 1)]
    index = PostgresSearchIndex(database)
    new = SearchDoc(Passage(history_source(Y), 2, "user", None, 2000, "kiwi plum"), ("kiwi", "plum"))
    await index.add("a", history_source(Y), [new], "mark")
    memo = SearchDoc(Passage(TODO, 1, "user", None, 2001, "kiwi"), ("kiwi",))
    await index.add("a", TODO, [memo], "mark")
    assert await pack_pending(database, "a") == 2
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        cursor = await conn.execute("SELECT code, src, channel FROM search_names WHERE agent = 'a' ORDER BY code")
        assert (await cursor.fetchall())[3:] == [(4, "todo.md", "")]  # Y kept its code
    assert _shown(await index.search("a", ["kiwi"], every, 10)) == [("", "todo.md", 1), (Y, "", 2)]
    await index.drop_session("a", X)
    await index.drop_source("a", TODO)
    assert await rows_holding(postgres_dsn, "xylophone", ("search_docs", "search_blocks", "search_names")) == 0
    assert await rows_holding(postgres_dsn, "todo.md", ("search_docs", "search_blocks", "search_names")) == 0
    assert await rows_holding(postgres_dsn, "yodel", ("search_names",)) == 1  # still has docs
    assert _shown(await index.search("a", ["apple"], every, 10)) == [("", "notes.md", 1), (Y, "", 1)]
