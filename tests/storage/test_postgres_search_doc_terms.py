"""Migration 18: each search doc keeps its distinct terms; its postings are deleted through the primary key (no index
by doc), also for docs stored before the migration."""

from __future__ import annotations

import psycopg

from agenthub.storage.postgres import Database
from agenthub.storage.postgres.schema import MIGRATIONS, apply_migrations
from agenthub.storage.postgres.search import PostgresSearchIndex
from agenthub.storage.search_index import Passage, SearchDoc, SearchScope, history_source

SESSION = "a:http:x"
OLD_DOCS = {1: ["apple", "pear"], 2: ["apple"], 3: ["apple", "plum"]}


async def _at_version_16_with_docs(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
    await conn.execute(
        "CREATE TABLE schema_version (version integer PRIMARY KEY, what text NOT NULL, "
        "applied_at timestamptz NOT NULL DEFAULT now())"
    )
    for migration in MIGRATIONS:
        if migration.version <= 16:
            for statement in migration.sql:
                await conn.execute(statement)
            await conn.execute("INSERT INTO schema_version VALUES (%s, %s)", (migration.version, migration.what))
    for doc, terms in OLD_DOCS.items():  # as the index wrote them before: docs, postings, df, N
        await conn.execute(
            "INSERT INTO search_docs (id, agent, kind, session, name, seq, role, ts, body, length) "
            "VALUES (%s, 'a', 'history', %s, '', %s, 'user', %s, %s, %s)",
            (doc, SESSION, doc, 1000 + doc, " ".join(terms), len(terms)),
        )
        for term in terms:
            await conn.execute(
                "INSERT INTO search_postings VALUES ('a', %s, %s, 1, %s, %s, %s, 'http')",
                (term, doc, len(terms), 1000 + doc, SESSION),
            )
    await conn.execute("SELECT setval('search_docs_id_seq', 3)")
    await conn.execute("INSERT INTO search_terms VALUES ('a', 'apple', 3), ('a', 'pear', 1), ('a', 'plum', 1)")
    await conn.execute("INSERT INTO search_stats (agent, docs, total_length) VALUES ('a', 3, 5)")


async def test_docs_stored_before_migration_18_get_their_terms_and_leave_no_posting_when_removed(
    postgres_dsn: str,
) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        await _at_version_16_with_docs(conn)
        assert 18 in await apply_migrations(conn)
        cursor = await conn.execute("SELECT id, terms FROM search_docs ORDER BY id")
        assert [(doc, sorted(terms)) for doc, terms in await cursor.fetchall()] == list(OLD_DOCS.items())
        cursor = await conn.execute("SELECT count(*) FROM pg_indexes WHERE indexname = 'search_postings_by_doc'")
        assert await cursor.fetchone() == (0,)

    database = Database(postgres_dsn)
    index = PostgresSearchIndex(database)
    try:
        source = history_source(SESSION)
        new = SearchDoc(Passage(source, 9, "user", None, 2000, "kiwi apple"), ("kiwi", "apple", "kiwi"))
        await index.add("a", source, [new], "mark")
        hits = await index.search("a", ["kiwi"], SearchScope(SESSION), 5)
        assert [hit.passage.text for hit in hits] == ["kiwi apple"]
        await index.drop_source("a", source)  # the old docs and the new one: every posting and term goes
        assert await index.search("a", ["apple"], SearchScope(SESSION), 5) == []
    finally:
        await database.close()
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        for table in ("search_postings", "search_blocks", "search_docs", "search_terms"):
            cursor = await conn.execute(f"SELECT count(*) FROM {table}")
            assert await cursor.fetchone() == (0,), table
