"""`PostgresOutbox`: the `Outbox` in the table `outbox`. A claim is one UPDATE of the oldest pending row taken with
FOR UPDATE SKIP LOCKED, so two drainers (an old holder and its successor) never claim the same row."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Json

from agenthub.storage.outbox import UNKNOWN_OUTCOME, OutboxRow, Outcome, State
from agenthub.storage.postgres.database import Database

FINISHED_KEPT_S = 600
"""Finished rows nobody discarded (their sender died) are deleted after this: they hold a message's text."""

_CLAIM = """
UPDATE outbox SET state = 'claimed', claimed_by = %(holder)s,
    claimed_until = now() + %(claim_s)s * interval '1 second'
WHERE id = (
    SELECT id FROM outbox WHERE target = %(target)s AND state = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED
)
RETURNING id, target, payload
"""
_FINISH = """
UPDATE outbox SET state = %(state)s, reason = %(reason)s, finished_at = now()
WHERE id = %(id)s AND state = 'claimed' AND claimed_by = %(holder)s
"""
_EXPIRE = """
UPDATE outbox SET state = 'failed', reason = %(reason)s, finished_at = now()
WHERE target = %(target)s AND state = 'claimed' AND claimed_until < now()
"""
_SWEEP = "DELETE FROM outbox WHERE finished_at < now() - %(kept)s * interval '1 second'"


class PostgresOutbox:
    def __init__(self, database: Database) -> None:
        self.database = database

    async def put(self, target: str, payload: dict[str, Any]) -> int:
        async with self.database.connection("store a send for another instance") as conn:
            cursor = await conn.execute(
                "INSERT INTO outbox (target, payload) VALUES (%s, %s) RETURNING id", (target, Json(payload))
            )
            row = await cursor.fetchone()
        assert row is not None
        return int(row[0])

    async def claim(self, target: str, holder: str, claim_s: float) -> OutboxRow | None:
        async with self.database.connection("claim a send") as conn:
            cursor = await conn.execute(_CLAIM, {"target": target, "holder": holder, "claim_s": claim_s})
            row = await cursor.fetchone()
        return None if row is None else OutboxRow(int(row[0]), row[1], row[2])

    async def finish(self, row_id: int, holder: str, reason: str | None) -> None:
        state: State = "sent" if reason is None else "failed"
        async with self.database.connection("record a send's outcome") as conn:
            await conn.execute(_FINISH, {"id": row_id, "holder": holder, "state": state, "reason": reason})

    async def outcome(self, row_id: int) -> Outcome | None:
        async with self.database.connection("read a send's outcome") as conn:
            cursor = await conn.execute("SELECT state, reason FROM outbox WHERE id = %s", (row_id,))
            row = await cursor.fetchone()
        return None if row is None else Outcome(row[0], row[1])

    async def withdraw(self, row_id: int, reason: str) -> bool:
        async with self.database.connection("withdraw a send") as conn:
            cursor = await conn.execute(
                "UPDATE outbox SET state = 'failed', reason = %s, finished_at = now() "
                "WHERE id = %s AND state = 'pending'",
                (reason, row_id),
            )
        return cursor.rowcount == 1

    async def expire_claims(self, target: str) -> int:
        async with self.database.connection("expire claimed sends") as conn:
            cursor = await conn.execute(_EXPIRE, {"target": target, "reason": UNKNOWN_OUTCOME})
            expired = cursor.rowcount
            await conn.execute(_SWEEP, {"kept": FINISHED_KEPT_S})
        return expired

    async def discard(self, row_id: int) -> None:
        async with self.database.connection("discard a finished send") as conn:
            await conn.execute("DELETE FROM outbox WHERE id = %s AND state IN ('sent', 'failed')", (row_id,))
