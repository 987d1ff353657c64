"""`PostgresMemoryStore`: the memory text files (design §4's MEMORY.md, USER.md, chat and per-user files, their
`.bak`, the L3 watermark) as rows of `memory_files`, one per `MemoryName`; a write is one statement."""

from __future__ import annotations

from typing import Any

from agenthub.storage.memory_files import MemoryName
from agenthub.storage.postgres.database import Database

_NAME = "kind = %(kind)s AND agent = %(agent)s AND chat = %(chat)s AND person = %(person)s AND backup = %(backup)s"
_WRITE = """
INSERT INTO memory_files (kind, agent, chat, person, backup, body)
VALUES (%(kind)s, %(agent)s, %(chat)s, %(person)s, %(backup)s, %(body)s)
ON CONFLICT (kind, agent, chat, person, backup) DO UPDATE SET body = EXCLUDED.body, changed_at = now()
"""


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
    the read-modify-writes of one instance are serialised by `MemoryWriter` as with files."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def read(self, name: MemoryName) -> str:
        async with self.database.connection("read a memory file") as conn:
            cursor = await conn.execute(f"SELECT body FROM memory_files WHERE {_NAME}", _params(name))
            row = await cursor.fetchone()
        return "" if row is None else bytes(row[0]).decode("utf-8")

    async def write(self, name: MemoryName, text: str) -> None:
        body = text.encode("utf-8")  # the files backend refuses what UTF-8 cannot encode alike
        async with self.database.connection("write a memory file") as conn:
            await conn.execute(_WRITE, _params(name, body=body))

    async def delete(self, name: MemoryName) -> bool:
        async with self.database.connection("delete a memory file") as conn:
            cursor = await conn.execute(f"DELETE FROM memory_files WHERE {_NAME}", _params(name))
        return cursor.rowcount > 0

    async def names(self) -> list[MemoryName]:
        """Every stored name (for `agenthub store migrate`'s count check)."""
        async with self.database.connection("list the memory files") as conn:
            cursor = await conn.execute("SELECT kind, agent, chat, person, backup FROM memory_files")
            rows = await cursor.fetchall()
        return [MemoryName(row[0], agent=row[1], chat=row[2], person=row[3], backup=row[4]) for row in rows]
