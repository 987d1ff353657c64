"""Catching the shared search index up with the history tables: the tables are the queue. Each session's history
and archive are indexed up to a watermark (the last seq indexed, with digests of the first and last record
indexed: a source that no longer starts and ends there was rewritten and is indexed again from the start); the
session head seen is kept beside it, so a session whose head moved since lags behind. A session is caught up in
one transaction under its sources' advisory lock, the records tokenised by the caller's `DocMaker` meanwhile
(storage never tokenises), so two instances catching up the same session never index it twice, and a catch-up
never writes back text that a redaction removed after it read."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from agenthub.session_keys import SessionKey
from agenthub.storage.memory_files import MemoryName
from agenthub.storage.postgres.database import Database
from agenthub.storage.postgres.search_catchup import (
    KEEP_SKIPPED,
    TABLES,
    DocMaker,
    HistoryRecord,
    Mark,
    State,
    catch_up_batch,
    parse_record,
)
from agenthub.storage.postgres.search_pack import PACK_AT
from agenthub.storage.postgres.search_writes import (
    Conn,
    drop_docs,
    insert_docs,
    lock_source,
    set_watermark,
    source_params,
)
from agenthub.storage.search_index import ARCHIVE, HISTORY, MEMORY, SearchDoc, SourceRef

__all__ = ["DocMaker", "HistoryRecord", "MemoryDocMaker", "PostgresIndexFeed"]

KNOWN_SESSIONS = 10_000
"""Sessions whose state an instance remembers at most (a guess that saves a round trip when it is right)."""
BATCH_SESSIONS = 64
"""Sessions caught up in one transaction at most (their records are held in memory meanwhile)."""
MemoryDocMaker = Callable[[SourceRef, str, int | None], list[SearchDoc]]
"""(source, a memory file's text, its time in ms) → its docs."""

_KEY = "agent = %(agent)s AND channel = %(channel)s AND chat_id = %(chat_id)s"
_STATE = f"""
SELECT (SELECT next_seq::text || '@' || changed_at::text FROM session_heads WHERE {_KEY}),
       (SELECT watermark FROM search_sources WHERE agent = %(agent)s AND kind = 'history' AND session = %(session)s
        AND name = ''),
       (SELECT watermark FROM search_sources WHERE agent = %(agent)s AND kind = 'archive' AND session = %(session)s
        AND name = ''),
       EXISTS (SELECT 1 FROM session_archive WHERE {_KEY})
"""
"""The session's head, its two sources' watermarks and whether it has an archive, read under its lock (first: the
records read after it are at least as new)."""

_LAGGING = """
SELECT coalesce(h.key, w.session) FROM (
    SELECT agent || ':' || channel || ':' || chat_id AS key, next_seq::text || '@' || changed_at::text AS head
    FROM session_heads WHERE agent = %(agent)s
) h FULL JOIN (
    SELECT session, head FROM search_sources WHERE agent = %(agent)s AND kind = 'history'
) w ON w.session = h.key
WHERE h.head IS DISTINCT FROM w.head
"""
"""The sessions of an agent whose head moved (an append, a replace, a clear, a delete) since they were indexed."""


class PostgresIndexFeed:
    """Reads the history tables and memory texts into the shared index."""

    def __init__(self, database: Database, *, pack_at: int = PACK_AT) -> None:
        self.database = database
        self.pack_at = pack_at
        self.due: set[str] = set()
        """Agents whose pending docs reached `pack_at` at a write of this instance (its service packs them)."""
        self._known: OrderedDict[str, State] = OrderedDict()
        """The state this instance left each session it caught up in (`search_catchup.catch_up_batch`: a guess,
        checked against the database's)."""

    async def lagging(self, agent: str, sessions: Sequence[str] | None = None) -> list[SessionKey]:
        """The sessions of `agent` (only `sessions`, when given) that changed since they were indexed."""
        sql = _LAGGING if sessions is None else f"SELECT * FROM ({_LAGGING}) l(s) WHERE l.s = ANY(%(only)s)"
        async with self.database.connection("read the search index") as conn:
            cursor = await conn.execute(sql, {"agent": agent, "only": list(sessions or [])})
            rows = await cursor.fetchall()
        return [SessionKey.parse(row[0]) for row in rows]

    async def sync_sessions(self, keys: Sequence[SessionKey], make_docs: DocMaker) -> int:
        """Bring these sessions' histories and archives up to date, one transaction per agent (`search_catchup`;
        a session rewritten since it was indexed: indexed again on its own); the number of docs added."""
        by_agent: dict[str, list[SessionKey]] = {}
        for key in keys:
            by_agent.setdefault(key.agent, []).append(key)
        added = 0
        for agent, mine in sorted(by_agent.items()):
            mine.sort(key=str)
            for at in range(0, len(mine), BATCH_SESSIONS):
                # pipelined: the statements are sent as they come, the client waits only for a result it reads
                batch = mine[at : at + BATCH_SESSIONS]
                known = {str(k): self._known[str(k)] for k in batch if str(k) in self._known}
                async with self.database.connection("update the index") as conn, conn.pipeline(), conn.transaction():
                    caught = await catch_up_batch(conn, agent, batch, make_docs, known)
                self._remember(batch, caught.states)
                self._note_pending(agent, caught.pending)
                added += caught.added
                for key in caught.rewritten:
                    added += await self.sync_session(key, make_docs, full=True)
        return added

    def _note_pending(self, agent: str, pending: int | None) -> None:
        if pending is not None and pending >= self.pack_at:
            self.due.add(agent)

    def _remember(self, keys: Sequence[SessionKey], states: dict[str, State]) -> None:
        """The state a batch left its sessions in (the others forgotten), the least recently caught up dropped."""
        for key in keys:
            self._known.pop(str(key), None)
        self._known.update(states)
        while len(self._known) > KNOWN_SESSIONS:
            self._known.popitem(last=False)

    async def sync_session(self, key: SessionKey, make_docs: DocMaker, *, full: bool = False) -> int:
        """Bring the session's history and archive up to date (`full`: index them again from the start, as after
        a redaction or a rewrite); the number of docs added."""
        if not full:
            return await self.sync_sessions([key], make_docs)
        params = {"agent": key.agent, "channel": key.channel, "chat_id": key.chat_id}
        added = 0
        # pipelined: the statements are sent as they come, the client waits only for a result it reads
        async with self.database.connection("update the search index") as conn, conn.pipeline(), conn.transaction():
            history, archive = SourceRef(HISTORY, str(key)), SourceRef(ARCHIVE, str(key))
            await lock_source(conn, key.agent, history, durable=full)  # the session's lock: both its sources
            cursor = await conn.execute(_STATE, {**params, "session": str(key)})
            row = await cursor.fetchone()
            assert row is not None
            head = None if row[0] is None else str(row[0])
            added += await _sync_table(conn, key, history, params, make_docs, row[1], head=head, full=full)
            if row[2] is not None or row[3]:  # no archive, none indexed: nothing to do
                added += await _sync_table(conn, key, archive, params, make_docs, row[2], head=None, full=full)
        return added

    async def sync_memory(
        self, agent: str, source: SourceRef, text: str | None, ts: int | None, make_docs: MemoryDocMaker
    ) -> bool:
        """Index a memory file's `text` again when it changed (None: it is gone); True when it did."""
        digest = "" if text is None else hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()
        async with self.database.connection("update the search index") as conn:
            if await _memory_current(conn, agent, source, text, digest):
                return False
            async with conn.transaction():
                await lock_source(conn, agent, source)
                if await _memory_current(conn, agent, source, text, digest):
                    return False
                docs = [] if text is None else await asyncio.to_thread(make_docs, source, text, ts)
                await insert_docs(conn, agent, source, docs, await drop_docs(conn, agent, source))
                if text is None:
                    await conn.execute(
                        "DELETE FROM search_sources WHERE agent = %(agent)s AND kind = %(kind)s "
                        "AND session = %(session)s AND name = %(name)s",
                        source_params(agent, source),
                    )
                else:
                    await set_watermark(conn, agent, source, json.dumps({"md5": digest}))
        return True

    async def read_memory(self, name: MemoryName) -> tuple[str | None, int | None]:
        """A memory file's text (None when there is none) and when it changed (ms)."""
        async with self.database.connection("read a memory file") as conn:
            cursor = await conn.execute(
                "SELECT body, (extract(epoch FROM changed_at) * 1000)::bigint FROM memory_files "
                "WHERE kind = %s AND agent = %s AND chat = %s AND person = %s AND NOT backup",
                (name.kind, name.agent, name.chat, name.person),
            )
            row = await cursor.fetchone()
        if row is None:
            return None, None
        return bytes(row[0]).decode("utf-8", errors="replace"), int(row[1])

    async def memory_sources(self, agent: str) -> list[SourceRef]:
        async with self.database.connection("read the search index") as conn:
            cursor = await conn.execute(
                "SELECT name FROM search_sources WHERE agent = %s AND kind = %s ORDER BY name", (agent, MEMORY)
            )
            return [SourceRef(MEMORY, "", row[0]) for row in await cursor.fetchall()]

    async def agents(self) -> list[str]:
        """Every agent with a session or anything indexed."""
        async with self.database.connection("read the search index") as conn:
            cursor = await conn.execute(
                "SELECT agent FROM session_heads UNION SELECT agent FROM session_archive "
                "UNION SELECT agent FROM search_sources ORDER BY 1"
            )
            return [row[0] for row in await cursor.fetchall()]

    async def session_keys(self, agent: str) -> list[SessionKey]:
        """Every session of `agent` with a history, an archive or indexed docs."""
        async with self.database.connection("read the search index") as conn:
            cursor = await conn.execute(
                "SELECT agent || ':' || channel || ':' || chat_id FROM session_heads WHERE agent = %(a)s "
                "UNION SELECT agent || ':' || channel || ':' || chat_id FROM session_archive WHERE agent = %(a)s "
                "UNION SELECT session FROM search_sources WHERE agent = %(a)s AND kind != 'memory'",
                {"a": agent},
            )
            return sorted((SessionKey.parse(row[0]) for row in await cursor.fetchall()), key=str)


async def _memory_current(conn: Conn, agent: str, source: SourceRef, text: str | None, digest: str) -> bool:
    cursor = await conn.execute(
        "SELECT watermark FROM search_sources WHERE agent = %(agent)s AND kind = %(kind)s "
        "AND session = %(session)s AND name = %(name)s",
        source_params(agent, source),
    )
    row = await cursor.fetchone()
    if row is None:
        return text is None
    try:
        return text is not None and json.loads(row[0]).get("md5") == digest
    except (ValueError, AttributeError):
        return False


async def _sync_table(
    conn: Conn,
    key: SessionKey,
    source: SourceRef,
    params: dict[str, Any],
    make_docs: DocMaker,
    watermark: str | None,
    *,
    head: str | None,
    full: bool,
) -> int:
    """One of the session's tables (indexed up to `watermark`): its new records indexed, or all of them again when
    it was rewritten."""
    table = TABLES[source.kind]
    mark = None if full else Mark.parse(watermark)
    start = mark.last + 1 if mark is not None and mark.last >= 0 else 0
    read = await _read_from(conn, table, params, start)  # sent with the check, as if the source went on
    resumed = mark is not None and await _continues(conn, table, params, mark)
    if not resumed:
        start = 0
        read = await _read_from(conn, table, params, start)
    rows = await read.fetchall()
    if resumed and mark is not None and not any(r[0] >= start for r in rows):
        if head is not None or source.kind == HISTORY:
            await set_watermark(conn, key.agent, source, mark.dump(), head)
        return 0
    records = [(int(r[0]), rec) for r in rows if isinstance(rec := parse_record(r[1]), dict)]
    skipped = mark.skipped if resumed and mark is not None else []
    docs, skipped = await asyncio.to_thread(make_docs, source, records, start, skipped) if records else ([], skipped)
    # resumed: only records past the watermark, none of them indexed (the watermark moves with its docs)
    dropped = (0, 0) if resumed else await drop_docs(conn, key.agent, source)
    new = Mark(skipped=skipped[-KEEP_SKIPPED:])
    if resumed and mark is not None:
        new.first, new.first_md5 = mark.first, mark.first_md5
    elif rows:
        new.first, new.first_md5 = int(rows[0][0]), str(rows[0][2])
    if rows:
        new.last, new.last_md5 = int(rows[-1][0]), str(rows[-1][2])
    elif resumed and mark is not None:
        new.last, new.last_md5 = mark.last, mark.last_md5
    async with conn.pipeline():  # the writes sent together: none of their results is needed
        await insert_docs(conn, key.agent, source, docs, dropped)
        await set_watermark(conn, key.agent, source, new.dump(), head)
    return len(docs)


async def _read_from(conn: Conn, table: str, params: dict[str, Any], start: int) -> Any:
    """The table's records from `start` on, and the one before it (a tool result's tool_use): a cursor to fetch."""
    return await conn.execute(
        f"SELECT seq, record::text, md5(record::text) FROM {table} WHERE {_KEY} AND seq >= %(from)s ORDER BY seq",
        {**params, "from": max(start - 1, 0)},
    )


async def _continues(conn: Conn, table: str, params: dict[str, Any], mark: Mark) -> bool:
    """True if the table still starts with the first indexed record and still holds the last one unchanged."""
    if mark.last < 0:
        return False
    cursor = await conn.execute(
        f"SELECT (SELECT min(seq) FROM {table} WHERE {_KEY}), "
        f"(SELECT md5(record::text) FROM {table} WHERE {_KEY} AND seq = %(first)s), "
        f"(SELECT md5(record::text) FROM {table} WHERE {_KEY} AND seq = %(last)s)",
        {**params, "first": mark.first, "last": mark.last},
    )
    row = await cursor.fetchone()
    return row is not None and row[0] == mark.first and row[1] == mark.first_md5 and row[2] == mark.last_md5
