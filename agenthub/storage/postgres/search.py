"""`PostgresSearchIndex`: the memory_search index in the tables of migration 7 (`schema.SEARCH_INDEX`), shared by
every instance. Passages arrive tokenised (the caller's `DocMaker`: storage never tokenises); each source (a
session's history, its archive, a memory file) is indexed up to a watermark under the source's advisory lock, so
the history tables themselves are the queue: whoever asks first brings a lagging session up to date. BM25
(k1 = 1.2, b = 0.75, idf = ln(1 + (N - df + 0.5) / (df + 0.5)), N and the average length per agent) is computed in
SQL; ties go to the newer passage."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from agenthub import jsonsafe
from agenthub.storage.keys import SessionKey
from agenthub.storage.postgres.database import Database

HISTORY, ARCHIVE, MEMORY = "history", "archive", "memory"
K1, B = 1.2, 0.75
_TABLES = {HISTORY: "session_records", ARCHIVE: "session_archive"}
_KEY = "agent = %(agent)s AND channel = %(channel)s AND chat_id = %(chat_id)s"


@dataclass(frozen=True)
class IndexDoc:
    """One tokenised passage: `pos` its record's seq (a memory file: its line), `terms` each term with its count."""

    pos: int
    role: str
    speaker: str
    ts: int | None
    text: str
    terms: dict[str, int]

    @property
    def length(self) -> int:
        return sum(self.terms.values())


DocMaker = Callable[[str, Sequence[tuple[int, dict[str, Any]]], int], list[IndexDoc]]
"""(kind, the source's records as (seq, record) oldest first, the first seq not indexed yet) → the passages of the
records from that seq on (the earlier ones are context: a tool result's tool_use)."""
LineMaker = Callable[[str], list[IndexDoc]]
"""A memory file's text → its passages."""


@dataclass(frozen=True)
class IndexScope:
    """What one search may see: the rows of `sources` (a session key, a memory source) and of every session on
    one of `channels`."""

    sources: tuple[str, ...]
    channels: tuple[str, ...] = ()


@dataclass(frozen=True)
class IndexHit:
    id: int
    src: str
    kind: str
    pos: int
    role: str
    speaker: str
    ts: int | None
    text: str
    score: float


def memory_source(relative: str) -> str:
    """The `src` of a memory file (by its path relative to its directory, e.g. `USER.md`)."""
    return "memory:" + relative


_SEARCH = """
WITH q AS (SELECT DISTINCT unnest(%(terms)s::text[]) AS term),
stats AS (
    SELECT docs::float8 AS n, total_length::float8 / greatest(docs, 1) AS avgdl FROM search_stats
    WHERE agent = %(agent)s
),
df AS (
    SELECT p.term, count(*)::float8 AS df FROM search_postings p JOIN q ON q.term = p.term
    WHERE p.agent = %(agent)s GROUP BY p.term
),
scored AS (
    SELECT p.doc, sum(
        ln(1 + (s.n - df.df + 0.5) / (df.df + 0.5))
        * p.tf * (%(k1)s + 1) / (p.tf + %(k1)s * (1 - %(b)s + %(b)s * p.length / s.avgdl))
    ) AS score
    FROM search_postings p JOIN df ON df.term = p.term CROSS JOIN stats s
    WHERE p.agent = %(agent)s AND (p.src = ANY(%(sources)s) OR p.channel = ANY(%(channels)s))
    GROUP BY p.doc
)
SELECT d.id, d.src, d.kind, d.pos, d.role, d.speaker, d.ts, d.body, scored.score
FROM scored JOIN search_docs d ON d.id = scored.doc
ORDER BY scored.score DESC, d.ts DESC NULLS LAST, d.id DESC
LIMIT %(limit)s
"""

_DROP_DOCS = """
WITH gone AS (
    DELETE FROM search_docs WHERE agent = %(agent)s AND src = %(src)s AND kind = ANY(%(kinds)s) RETURNING id, length
), postings AS (
    DELETE FROM search_postings WHERE doc IN (SELECT id FROM gone)
)
SELECT count(*), coalesce(sum(length), 0) FROM gone
"""

_INSERT_DOCS = """
INSERT INTO search_docs (id, agent, src, channel, kind, pos, role, speaker, ts, body, length)
SELECT t.id, %(agent)s, %(src)s, %(channel)s, %(kind)s, t.pos, t.role, t.speaker, t.ts, t.body, t.length
FROM unnest(%(ids)s::bigint[], %(pos)s::bigint[], %(roles)s::text[], %(speakers)s::text[], %(ts)s::bigint[],
            %(bodies)s::text[], %(lengths)s::int[]) AS t(id, pos, role, speaker, ts, body, length)
"""

_INSERT_POSTINGS = """
INSERT INTO search_postings (agent, term, doc, tf, length, src, channel)
SELECT %(agent)s, t.term, t.doc, t.tf, t.length, %(src)s, %(channel)s
FROM unnest(%(terms)s::text[], %(docs)s::bigint[], %(tfs)s::int[], %(lengths)s::int[]) AS t(term, doc, tf, length)
"""

_ADD_STATS = """
INSERT INTO search_stats AS s (agent, docs, total_length) VALUES (%(agent)s, %(docs)s, %(length)s)
ON CONFLICT (agent) DO UPDATE SET docs = s.docs + EXCLUDED.docs, total_length = s.total_length + EXCLUDED.total_length
"""

_SOURCE_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('search/' || %(agent)s || '/' || %(src)s, 0))"

_WATERMARK = """
SELECT first_pos, first_digest, last_pos, last_digest FROM search_sources
WHERE agent = %(agent)s AND src = %(src)s AND kind = %(kind)s
"""

_SET_WATERMARK = """
INSERT INTO search_sources AS w (agent, src, kind, first_pos, first_digest, last_pos, last_digest, head_seq,
                                 head_changed)
VALUES (%(agent)s, %(src)s, %(kind)s, %(first_pos)s, %(first_digest)s, %(last_pos)s, %(last_digest)s, %(head_seq)s,
        %(head_changed)s)
ON CONFLICT (agent, src, kind) DO UPDATE SET first_pos = EXCLUDED.first_pos, first_digest = EXCLUDED.first_digest,
    last_pos = EXCLUDED.last_pos, last_digest = EXCLUDED.last_digest, head_seq = EXCLUDED.head_seq,
    head_changed = EXCLUDED.head_changed
"""

_LAGGING = """
SELECT coalesce(h.agent || ':' || h.channel || ':' || h.chat_id, w.src)
FROM (SELECT * FROM session_heads WHERE agent = %(agent)s) h
FULL JOIN (SELECT * FROM search_sources WHERE agent = %(agent)s AND kind = 'history') w
    ON w.src = h.agent || ':' || h.channel || ':' || h.chat_id
WHERE (h.next_seq, h.changed_at) IS DISTINCT FROM (w.head_seq, w.head_changed)
"""
"""Sessions whose head moved (an append, a replace, a clear, a delete) since they were indexed."""


@dataclass
class _Source:
    agent: str
    src: str
    channel: str
    kind: str

    def params(self, **more: Any) -> dict[str, Any]:
        return {"agent": self.agent, "src": self.src, "channel": self.channel, "kind": self.kind, **more}


class PostgresSearchIndex:
    """The shared index. Every write is one transaction under the source's advisory lock."""

    def __init__(self, database: Database) -> None:
        self.database = database

    # ---- feeding -------------------------------------------------------------------------------

    async def lagging(self, agent: str, sessions: Sequence[str] | None = None) -> list[SessionKey]:
        """The sessions of `agent` (only `sessions`, when given) that changed since they were indexed."""
        sql = _LAGGING if sessions is None else f"SELECT * FROM ({_LAGGING}) l(src) WHERE l.src = ANY(%(only)s)"
        async with self.database.connection("read the search index") as conn:
            cursor = await conn.execute(sql, {"agent": agent, "only": list(sessions or [])})
            rows = await cursor.fetchall()
        return [SessionKey.parse(row[0]) for row in rows]

    async def sync_session(self, key: SessionKey, make_docs: DocMaker, *, full: bool = False) -> int:
        """Bring the session's history and archive up to date (`full`: index them again from the start); the
        number of passages added."""
        added = 0
        params = {"agent": key.agent, "channel": key.channel, "chat_id": key.chat_id}
        async with self.database.connection("update the search index") as conn, conn.transaction():
            await conn.execute(_SOURCE_LOCK, {"agent": key.agent, "src": str(key)})
            cursor = await conn.execute(f"SELECT next_seq, changed_at FROM session_heads WHERE {_KEY}", params)
            head = await cursor.fetchone()  # first: records read after it are at least as new
            for kind in (HISTORY, ARCHIVE):
                source = _Source(key.agent, str(key), key.channel, kind)
                added += await _sync_records(conn, source, params, make_docs, full=full)
            await conn.execute(
                "UPDATE search_sources SET head_seq = %(seq)s, head_changed = %(changed)s "
                "WHERE agent = %(agent)s AND src = %(src)s AND kind = 'history'",
                {"agent": key.agent, "src": str(key), "seq": head and head[0], "changed": head and head[1]},
            )
        return added

    async def sync_memory(self, agent: str, src: str, text: str | None, make_docs: LineMaker) -> None:
        """Index a memory file's `text` again when it changed (None: the file is gone)."""
        source = _Source(agent, src, "", MEMORY)
        digest = _digest(text)
        async with self.database.connection("update the search index") as conn:
            mark = await _watermark(conn, source)
            if (mark is None and text is None) or (mark is not None and mark[3] == digest):
                return
            async with conn.transaction():
                await conn.execute(_SOURCE_LOCK, source.params())
                mark = await _watermark(conn, source)
                if mark is not None and mark[3] == digest:
                    return
                docs = [] if text is None else await asyncio.to_thread(make_docs, text)
                dropped = await _drop(conn, source)
                await _insert(conn, source, docs, dropped)
                await _set_watermark(conn, source, 0, digest, len(docs) - 1, digest)

    async def memory_sources(self, agent: str) -> list[str]:
        async with self.database.connection("read the search index") as conn:
            cursor = await conn.execute(
                "SELECT src FROM search_sources WHERE agent = %s AND kind = %s ORDER BY src", (agent, MEMORY)
            )
            return [row[0] for row in await cursor.fetchall()]

    async def drop_agent(self, agent: str) -> None:
        """Everything indexed of `agent` (a rebuild starts here)."""
        async with self.database.connection("clear the search index") as conn, conn.transaction():
            for table in ("search_postings", "search_docs", "search_sources", "search_stats"):
                await conn.execute(f"DELETE FROM {table} WHERE agent = %s", (agent,))

    async def agents(self) -> list[str]:
        """Every agent with a session or an indexed source."""
        async with self.database.connection("read the search index") as conn:
            cursor = await conn.execute(
                "SELECT agent FROM session_heads UNION SELECT agent FROM session_archive "
                "UNION SELECT agent FROM search_sources ORDER BY 1"
            )
            return [row[0] for row in await cursor.fetchall()]

    async def session_keys(self, agent: str) -> list[SessionKey]:
        """Every session of `agent` with a history, an archive or indexed passages."""
        async with self.database.connection("read the search index") as conn:
            cursor = await conn.execute(
                "SELECT agent || ':' || channel || ':' || chat_id FROM session_heads WHERE agent = %(a)s "
                "UNION SELECT agent || ':' || channel || ':' || chat_id FROM session_archive WHERE agent = %(a)s "
                "UNION SELECT src FROM search_sources WHERE agent = %(a)s AND kind != 'memory'",
                {"a": agent},
            )
            return sorted((SessionKey.parse(row[0]) for row in await cursor.fetchall()), key=str)

    # ---- asking --------------------------------------------------------------------------------

    async def search(self, agent: str, terms: Sequence[str], scope: IndexScope, limit: int) -> list[IndexHit]:
        """The best `limit` passages for `terms` by BM25 within `scope`, ties newest first."""
        if not terms or limit < 1 or not (scope.sources or scope.channels):
            return []
        params = {
            "agent": agent, "terms": list(terms), "sources": list(scope.sources), "channels": list(scope.channels),
            "limit": limit, "k1": K1, "b": B,
        }  # fmt: skip
        async with self.database.connection("search the memory") as conn:
            cursor = await conn.execute(_SEARCH, params)
            rows = await cursor.fetchall()
        return [IndexHit(*row) for row in rows]

    async def neighbours(self, agent: str, hit: IndexHit) -> tuple[IndexHit | None, IndexHit | None]:
        """The passages just before and just after `hit` in its source."""
        found: list[IndexHit | None] = []
        async with self.database.connection("search the memory") as conn:
            for op, order in (("<", "DESC"), (">", "ASC")):
                cursor = await conn.execute(
                    "SELECT id, src, kind, pos, role, speaker, ts, body, 0.0 FROM search_docs "
                    f"WHERE agent = %(agent)s AND src = %(src)s AND kind = %(kind)s AND pos {op} %(pos)s "
                    f"ORDER BY pos {order} LIMIT 1",
                    {"agent": agent, "src": hit.src, "kind": hit.kind, "pos": hit.pos},
                )
                row = await cursor.fetchone()
                found.append(None if row is None else IndexHit(*row))
        return found[0], found[1]

    async def stats(self, agent: str) -> dict[str, int]:
        async with self.database.connection("read the search index") as conn:
            cursor = await conn.execute(
                "SELECT (SELECT count(*) FROM search_docs WHERE agent = %(a)s), "
                "(SELECT count(*) FROM search_sources WHERE agent = %(a)s)",
                {"a": agent},
            )
            row = await cursor.fetchone()
        assert row is not None
        return {"docs": int(row[0]), "sources": int(row[1])}


async def _sync_records(
    conn: AsyncConnection[TupleRow], source: _Source, key: dict[str, Any], make_docs: DocMaker, *, full: bool
) -> int:
    """One history or archive table of a session: the new records indexed, or all of them again when the source
    was rewritten (its first or last indexed record is not the one indexed) or `full`."""
    table = _TABLES[source.kind]
    mark = None if full else await _watermark(conn, source)
    start = 0
    if mark is not None and await _continues(conn, table, key, mark):
        start = int(mark[2]) + 1
    context_from = max(start - 1, 0)  # the last indexed record too: a tool result's tool_use
    cursor = await conn.execute(
        f"SELECT seq, record::text, md5(record::text) FROM {table} WHERE {_KEY} AND seq >= %(from)s ORDER BY seq",
        {**key, "from": context_from},
    )
    rows = await cursor.fetchall()
    if start > 0 and not [row for row in rows if row[0] >= start]:
        return 0  # nothing new
    records = [(int(row[0]), record) for row in rows if isinstance(record := _parse(row[1]), dict)]
    docs = await asyncio.to_thread(make_docs, source.kind, records, start) if records else []
    dropped = (0, 0) if start > 0 else await _drop(conn, source)
    await _insert(conn, source, docs, dropped)
    if rows:
        first = (mark[0], mark[1]) if start > 0 and mark is not None else (rows[0][0], rows[0][2])
        await _set_watermark(conn, source, int(first[0]), str(first[1]), int(rows[-1][0]), str(rows[-1][2]))
    elif mark is not None or full or source.kind == HISTORY:  # the history's row also keeps the head seen
        await _set_watermark(conn, source, 0, "", -1, "")
    return len(docs)


async def _continues(conn: AsyncConnection[TupleRow], table: str, key: dict[str, Any], mark: tuple[Any, ...]) -> bool:
    """True if the table still starts with the first indexed record and still holds the last one unchanged."""
    first_pos, first_digest, last_pos, last_digest = mark
    if last_pos < 0:
        return False
    cursor = await conn.execute(
        f"SELECT (SELECT min(seq) FROM {table} WHERE {_KEY}), "
        f"(SELECT md5(record::text) FROM {table} WHERE {_KEY} AND seq = %(first)s), "
        f"(SELECT md5(record::text) FROM {table} WHERE {_KEY} AND seq = %(last)s)",
        {**key, "first": first_pos, "last": last_pos},
    )
    row = await cursor.fetchone()
    return row is not None and row[0] == first_pos and row[1] == first_digest and row[2] == last_digest


async def _watermark(conn: AsyncConnection[TupleRow], source: _Source) -> tuple[Any, ...] | None:
    cursor = await conn.execute(_WATERMARK, source.params())
    return await cursor.fetchone()


async def _set_watermark(
    conn: AsyncConnection[TupleRow], source: _Source, first_pos: int, first: str, last_pos: int, last: str
) -> None:
    await conn.execute(
        _SET_WATERMARK,
        source.params(
            first_pos=first_pos, first_digest=first, last_pos=last_pos, last_digest=last, head_seq=None,
            head_changed=None,
        ),
    )  # fmt: skip


async def _drop(conn: AsyncConnection[TupleRow], source: _Source) -> tuple[int, int]:
    """Delete the source's passages and postings; (passages, their total length)."""
    cursor = await conn.execute(_DROP_DOCS, source.params(kinds=[source.kind]))
    row = await cursor.fetchone()
    return (0, 0) if row is None else (int(row[0]), int(row[1]))


async def _insert(
    conn: AsyncConnection[TupleRow], source: _Source, docs: Sequence[IndexDoc], dropped: tuple[int, int]
) -> None:
    """Store `docs` and their postings, and move the agent's N and total length by what was added and dropped."""
    if docs:
        cursor = await conn.execute("SELECT nextval('search_docs_id_seq') FROM generate_series(1, %s)", (len(docs),))
        ids = [int(row[0]) for row in await cursor.fetchall()]
        lengths = [doc.length for doc in docs]
        await conn.execute(
            _INSERT_DOCS,
            source.params(
                ids=ids, pos=[d.pos for d in docs], roles=[d.role for d in docs], speakers=[d.speaker for d in docs],
                ts=[d.ts for d in docs], bodies=[d.text for d in docs], lengths=lengths,
            ),
        )  # fmt: skip
        terms, doc_ids, tfs, doc_lengths = [], [], [], []
        for doc_id, doc, length in zip(ids, docs, lengths, strict=True):
            for term, tf in doc.terms.items():
                terms.append(term)
                doc_ids.append(doc_id)
                tfs.append(tf)
                doc_lengths.append(length)
        if terms:
            await conn.execute(_INSERT_POSTINGS, source.params(terms=terms, docs=doc_ids, tfs=tfs, lengths=doc_lengths))
    added, added_length = len(docs), sum(doc.length for doc in docs)
    if added != dropped[0] or added_length != dropped[1]:  # the one row every writer of the agent updates: last
        await conn.execute(
            _ADD_STATS, {"agent": source.agent, "docs": added - dropped[0], "length": added_length - dropped[1]}
        )


def _parse(text: str) -> object:
    try:
        return jsonsafe.loads(text)
    except ValueError:
        return None


def _digest(text: str | None) -> str:
    if text is None:
        return ""
    import hashlib

    return hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()
