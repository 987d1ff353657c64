"""`PostgresMemoryStore`: the memory text files (design §4's MEMORY.md, USER.md, chat and per-user files, their
`.bak`, the L3 watermark) as rows of `memory_files`, one per `MemoryName`; a write is one statement, a
read-modify-write one transaction under the file's advisory lock (every instance's writers serialised). A turn's
read comes from this instance's copy while the memory version is the one it was read at (`MemoryClock`)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from agenthub.storage.memory_files import Change, MemoryName, changed
from agenthub.storage.postgres.database import Database
from agenthub.storage.postgres.memory_clock import VERSION, MemoryClock

_NAME = "kind = %(kind)s AND agent = %(agent)s AND chat = %(chat)s AND person = %(person)s AND backup = %(backup)s"
_WRITE = """
INSERT INTO memory_files (kind, agent, chat, person, backup, body)
VALUES (%(kind)s, %(agent)s, %(chat)s, %(person)s, %(backup)s, %(body)s)
ON CONFLICT (kind, agent, chat, person, backup) DO UPDATE SET body = EXCLUDED.body, changed_at = now()
"""
_READ_MANY = f"""
SELECT 0::bigint, NULL::bytea, {VERSION}
UNION ALL
SELECT n.ord, m.body, NULL
FROM unnest(%(kinds)s::text[], %(agents)s::text[], %(chats)s::text[], %(persons)s::text[], %(backups)s::boolean[])
     WITH ORDINALITY AS n(kind, agent, chat, person, backup, ord)
JOIN memory_files m ON m.kind = n.kind AND m.agent = n.agent AND m.chat = n.chat AND m.person = n.person
                   AND m.backup = n.backup
"""
"""The files, and the memory version they are at (first, `ord` 0): one statement, so one snapshot."""
KEPT = 4_096
"""How many files' texts an instance keeps (the least recently read go first)."""
_FILE_LOCK = (
    "SELECT pg_advisory_xact_lock(hashtextextended("
    "'memory/' || %(kind)s || '/' || %(agent)s || '/' || %(chat)s || '/' || %(person)s, 0))"
)
"""A file's (and its backup's) transaction lock: it exists before the file's row does."""


def _params(name: MemoryName, **more: Any) -> dict[str, Any]:
    return {
        "kind": name.kind,
        "agent": name.agent,
        "chat": name.chat,
        "person": name.person,
        "backup": name.backup,
        **more,
    }


class PostgresMemoryStore:
    """The `MemoryStore` on PostgreSQL: a reader sees the old or the new text, never a mix (one row, one statement);
    `update` holds the file's advisory transaction lock from its read to its write, so the read-modify-writes of
    every instance are serialised (a row lock could not: a file not written yet has no row to lock)."""

    def __init__(self, database: Database, clock: MemoryClock | None = None) -> None:
        self.database = database
        self.clock = MemoryClock() if clock is None else clock
        """Shared with the stores whose statements bring the memory version back (the history's appends)."""
        self._kept: OrderedDict[MemoryName, tuple[int, str]] = OrderedDict()
        """Each file's text as read here, with the memory version it was read at."""
        self._writes = 0
        """Moved before and after each write of this instance: a read it overlapped may hold the old text."""

    def label(self, name: MemoryName) -> str:
        return f"postgres:{'auth' if name.in_auth else 'data'}/{name.relative}"

    async def read(self, name: MemoryName) -> str:
        async with self.database.connection("read a memory file") as conn:
            return await _read(conn, name)

    async def read_many(self, names: Sequence[MemoryName], *, fresh_since: float | None = None) -> list[str]:
        """Every file of `names`, from the texts kept when the memory version a statement sent at or after
        `fresh_since` (monotonic clock) brought back is the one they were read at: then every change committed
        before `fresh_since` is in them. Otherwise in one statement, which brings the version back too."""
        if not names:
            return []
        if fresh_since is not None:
            kept = self._kept_at(names, self.clock.version_since(fresh_since))
            if kept is not None:
                return kept
        params = {
            "kinds": [n.kind for n in names],
            "agents": [n.agent for n in names],
            "chats": [n.chat for n in names],
            "persons": [n.person for n in names],
            "backups": [n.backup for n in names],
        }
        writes, stamp = self._writes, time.monotonic()
        async with self.database.connection("read a memory file") as conn:
            cursor = await conn.execute(_READ_MANY, params)
            rows = await cursor.fetchall()
        bodies = {int(row[0]): bytes(row[1]).decode("utf-8") for row in rows if row[1] is not None}
        texts = [bodies.get(index, "") for index in range(1, len(names) + 1)]
        version = next(int(row[2]) for row in rows if row[2] is not None)
        self.clock.learnt(version, stamp)
        if writes == self._writes:
            for name, text in zip(names, texts, strict=True):
                self._keep(name, version, text)
        return texts

    def _kept_at(self, names: Sequence[MemoryName], version: int | None) -> list[str] | None:
        if version is None:
            return None
        texts = []
        for name in names:
            kept = self._kept.get(name)
            if kept is None or kept[0] != version:
                return None
            self._kept.move_to_end(name)
            texts.append(kept[1])
        return texts

    def _keep(self, name: MemoryName, version: int, text: str) -> None:
        self._kept[name] = (version, text)
        self._kept.move_to_end(name)
        while len(self._kept) > KEPT:
            self._kept.popitem(last=False)

    @contextmanager
    def _writing(self, *names: MemoryName) -> Iterator[None]:
        """Around a write of `names`: their kept texts dropped, and no read that overlapped it keeps any text."""
        self._writes += 1
        for name in names:
            self._kept.pop(name, None)
        try:
            yield
        finally:
            self._writes += 1
            for name in names:
                self._kept.pop(name, None)

    async def write(self, name: MemoryName, text: str) -> None:
        with self._writing(name):
            async with self.database.connection("write a memory file") as conn:
                await _write(conn, name, text)

    async def update(self, name: MemoryName, change: Change, *, keep_backup: bool = False) -> str:
        with self._writing(name, name.backup_name()):
            return await self._update(name, change, keep_backup=keep_backup)

    async def _update(self, name: MemoryName, change: Change, *, keep_backup: bool) -> str:
        async with self.database.connection("write a memory file") as conn, conn.transaction():
            await conn.execute(_FILE_LOCK, _params(name.main_name()))
            current = await _read(conn, name)
            new = changed(current, change)
            if new is None:
                return current
            if keep_backup and current:
                await _write(conn, name.backup_name(), current)
            await _write(conn, name, new)
            return new

    async def delete(self, name: MemoryName) -> bool:
        with self._writing(name):
            async with self.database.connection("delete a memory file") as conn, conn.transaction():
                await conn.execute(_FILE_LOCK, _params(name.main_name()))  # never inside another instance's update
                cursor = await conn.execute(f"DELETE FROM memory_files WHERE {_NAME}", _params(name))
        return cursor.rowcount > 0

    async def group_profiles(self, person: str) -> list[MemoryName]:
        async with self.database.connection("list the group profiles") as conn:
            cursor = await conn.execute(
                "SELECT DISTINCT agent, chat FROM memory_files WHERE kind = 'group_profile' AND person = %s "
                "ORDER BY chat",
                (person,),
            )
            rows = await cursor.fetchall()
        return [MemoryName("group_profile", agent=row[0], chat=row[1], person=person) for row in rows]

    async def names(self) -> list[MemoryName]:
        """Every stored name (for `agenthub store migrate`'s count check)."""
        async with self.database.connection("list the memory files") as conn:
            cursor = await conn.execute("SELECT kind, agent, chat, person, backup FROM memory_files")
            rows = await cursor.fetchall()
        return [MemoryName(row[0], agent=row[1], chat=row[2], person=row[3], backup=row[4]) for row in rows]


async def _read(conn: AsyncConnection[TupleRow], name: MemoryName) -> str:
    cursor = await conn.execute(f"SELECT body FROM memory_files WHERE {_NAME}", _params(name))
    row = await cursor.fetchone()
    return "" if row is None else bytes(row[0]).decode("utf-8")


async def _write(conn: AsyncConnection[TupleRow], name: MemoryName, text: str) -> None:
    body = text.encode("utf-8")  # the files backend refuses what UTF-8 cannot encode alike
    await conn.execute(_WRITE, _params(name, body=body))
