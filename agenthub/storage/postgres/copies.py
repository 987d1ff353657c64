"""`store_copies`: what `agenthub store migrate` copied, item by item, with a digest of what it wrote; a re-run
tells an item the database has changed since (left alone) from one still as it was copied."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from agenthub.storage.postgres.database import Database

Write = Callable[[AsyncConnection[TupleRow]], Awaitable[object]]

_RECORD = (
    "INSERT INTO store_copies (kind, item, digest) VALUES (%s, %s, %s) "
    "ON CONFLICT (kind, item) DO UPDATE SET digest = excluded.digest, copied_at = now()"
)


class CopyLedger:
    """The digests of the items a migration copied, per kind (`sessions`, `memory_files`, `tokens`, `inbox`)."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def digests(self, kind: str) -> dict[str, str]:
        async with self.database.connection("read what was copied") as conn:
            cursor = await conn.execute("SELECT item, digest FROM store_copies WHERE kind = %s", (kind,))
            rows = await cursor.fetchall()
        return {str(item): str(digest) for item, digest in rows}

    async def record(self, kind: str, item: str, digest: str) -> None:
        async with self.database.connection("record what was copied") as conn:
            await conn.execute(_RECORD, (kind, item, digest))

    async def write_and_record(self, kind: str, item: str, digest: str, write: Write) -> None:
        """`write` (on the connection given) and the record of it in one transaction: the database never holds
        the item without the record (an entry restored, then answered and gone, is never taken for one not
        copied yet)."""
        async with self.database.connection("copy and record an item") as conn, conn.transaction():
            await write(conn)
            await conn.execute(_RECORD, (kind, item, digest))
