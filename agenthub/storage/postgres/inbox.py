"""`PostgresInbox`: the durable inbox shared by every instance. `accept` returns once its row is committed; the
sequence orders entries by acceptance; a settled entry's row is deleted."""

from __future__ import annotations

import uuid
from typing import Any

from agenthub import jsonsafe
from agenthub.storage.inbox import InboxEntry
from agenthub.storage.postgres.database import Database
from agenthub.storage.postgres.sessions import json_text

_ACCEPT = """
INSERT INTO inbox (id, source, accepted_at, payload, session)
VALUES (%(id)s, %(source)s, extract(epoch FROM now()), %(payload)s::json, %(session)s)
RETURNING seq, accepted_at
"""
_ASSIGN = "UPDATE inbox SET session = %(session)s WHERE id = %(id)s AND session IS NULL"
_EARLIER = """
SELECT id FROM inbox
WHERE session = %(session)s AND seq < (SELECT seq FROM inbox WHERE id = %(id)s)
ORDER BY seq
"""
"""Served by the index `(session, seq)` of migration 3; a settled (deleted) `id` compares with NULL: no rows."""
_UNSETTLED = "SELECT id, seq, accepted_at, source, payload::text FROM inbox WHERE source LIKE %(prefix)s ORDER BY seq"


class PostgresInbox:
    """The `Inbox` on PostgreSQL. `depth()` is what this instance last saw (set by `unsettled`, moved by its own
    accepts and settles); `count()` asks the database."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self._depth = 0

    async def accept(self, source: str, payload: dict[str, Any], *, session: str | None = None) -> InboxEntry:
        entry_id = uuid.uuid4().hex
        text = json_text(payload)
        params = {"id": entry_id, "source": source, "payload": text, "session": session}
        async with self.database.connection("accept the message") as conn:
            cursor = await conn.execute(_ACCEPT, params)
            row = await cursor.fetchone()
        assert row is not None
        self._depth += 1
        return InboxEntry(entry_id, int(row[0]), float(row[1]), source, jsonsafe.loads(text), session)

    async def assign(self, entry_id: str, session: str) -> None:
        async with self.database.connection("name the message's session") as conn:
            await conn.execute(_ASSIGN, {"id": entry_id, "session": session})

    async def earlier_unsettled(self, session: str, entry_id: str) -> list[str]:
        async with self.database.connection("list the session's earlier messages") as conn:
            cursor = await conn.execute(_EARLIER, {"id": entry_id, "session": session})
            rows = await cursor.fetchall()
        return [str(row[0]) for row in rows]

    async def settle(self, entry_id: str) -> None:
        async with self.database.connection("settle the message") as conn:
            cursor = await conn.execute("DELETE FROM inbox WHERE id = %(id)s", {"id": entry_id})
        if cursor.rowcount > 0:
            self._depth = max(0, self._depth - 1)

    async def unsettled(self, source_prefix: str = "") -> list[InboxEntry]:
        """Every unsettled entry in acceptance order, or those whose source starts with `source_prefix`."""
        async with self.database.connection("list the unanswered messages") as conn:
            cursor = await conn.execute(_UNSETTLED, {"prefix": _like_prefix(source_prefix)})
            rows = await cursor.fetchall()
        entries = [InboxEntry(row[0], int(row[1]), float(row[2]), row[3], jsonsafe.loads(row[4])) for row in rows]
        if not source_prefix:
            self._depth = len(entries)
        return entries

    async def restore(self, entry: InboxEntry) -> bool:
        """Store an entry accepted elsewhere under its own id and time (`agenthub store migrate`); False when it is
        there already. Its seq is new, in the order entries are restored."""
        params = {"id": entry.id, "source": entry.source, "at": entry.accepted_at, "payload": json_text(entry.payload)}
        async with self.database.connection("copy an unanswered message") as conn:
            cursor = await conn.execute(
                "INSERT INTO inbox (id, source, accepted_at, payload) "
                "VALUES (%(id)s, %(source)s, %(at)s, %(payload)s::json) ON CONFLICT (id) DO NOTHING",
                params,
            )
        if cursor.rowcount > 0:
            self._depth += 1
        return cursor.rowcount > 0

    def depth(self) -> int:
        return self._depth

    async def count(self) -> int:
        async with self.database.connection("count the unanswered messages") as conn:
            cursor = await conn.execute("SELECT count(*) FROM inbox")
            row = await cursor.fetchone()
        return int(row[0]) if row is not None else 0

    async def drop_settled(self) -> None:
        """Nothing to do: a settled entry's row is deleted when it is settled."""
        return None

    async def aclose(self) -> None:
        return None  # the pool belongs to the `Stores` bundle


def _like_prefix(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"
