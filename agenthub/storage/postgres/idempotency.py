"""`PostgresIdempotency`: the HTTP API's idempotency keys in the table `idempotency_keys`, shared by every instance
(a retry through any instance joins the first request or gets its answer); times on the database's clock."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from agenthub.storage.idempotency import ACCEPT_GRACE_S, SWEEP_EVERY_S, IdempotencyRecord
from agenthub.storage.json_text import json_text
from agenthub.storage.postgres.database import Database

_LIVE = """(k.created_at > now() - %(window)s * interval '1 second'
    AND (k.accepted OR k.created_at > now() - %(grace)s * interval '1 second'))"""

_CLAIM = f"""
INSERT INTO idempotency_keys AS k (scope, key, fingerprint)
VALUES (%(scope)s, %(key)s, %(fingerprint)s)
ON CONFLICT (scope, key) DO UPDATE
    SET fingerprint = EXCLUDED.fingerprint, created_at = now(), accepted = false, final = NULL
    WHERE NOT {_LIVE}
RETURNING 1
"""
"""A row comes back when the key is new, or its record had left the window (or was taken and never stored): it
is this request's now; none when a live request of any instance has it."""

_GET = f"""SELECT fingerprint, accepted, final FROM idempotency_keys AS k
WHERE scope = %(scope)s AND key = %(key)s AND {_LIVE}"""


class PostgresIdempotency:
    """The `IdempotencyStore` on PostgreSQL; records out of the window are deleted now and then."""

    def __init__(self, database: Database, *, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.database = database
        self.window_s = window_s
        self._clock = clock
        self._last_purge: float | None = None

    def _params(self, scope: str, key: str, **extra: Any) -> dict[str, Any]:
        return {"scope": scope, "key": key, "window": self.window_s, "grace": ACCEPT_GRACE_S, **extra}

    async def claim(self, scope: str, key: str, fingerprint: str) -> IdempotencyRecord | None:
        params = self._params(scope, key, fingerprint=fingerprint)
        async with self.database.connection("take an idempotency key") as conn:
            cursor = await conn.execute(_CLAIM, params)
            taken = await cursor.fetchone() is not None
        if self._last_purge is None or self._clock() - self._last_purge >= SWEEP_EVERY_S:
            await self.purge()
        if taken:
            return None
        found = await self.get(scope, key)
        return found if found is not None else IdempotencyRecord(fingerprint)  # gone meanwhile: a join waits

    async def get(self, scope: str, key: str) -> IdempotencyRecord | None:
        async with self.database.connection("read an idempotency key") as conn:
            cursor = await conn.execute(_GET, self._params(scope, key))
            row = await cursor.fetchone()
        if row is None:
            return None
        final = row[2] if isinstance(row[2], dict) or row[2] is None else json.loads(row[2])
        return IdempotencyRecord(str(row[0]), bool(row[1]), final)

    async def accepted(self, scope: str, key: str) -> None:
        async with self.database.connection("mark an idempotency key stored") as conn:
            await conn.execute(
                "UPDATE idempotency_keys SET accepted = true WHERE scope = %(scope)s AND key = %(key)s",
                self._params(scope, key),
            )

    async def finish(self, scope: str, key: str, final: dict[str, Any]) -> None:
        async with self.database.connection("keep an idempotent answer") as conn:
            await conn.execute(
                "UPDATE idempotency_keys SET final = %(final)s WHERE scope = %(scope)s AND key = %(key)s",
                self._params(scope, key, final=json_text(final)),
            )

    async def release(self, scope: str, key: str) -> None:
        async with self.database.connection("free an idempotency key") as conn:
            await conn.execute(
                "DELETE FROM idempotency_keys WHERE scope = %(scope)s AND key = %(key)s", self._params(scope, key)
            )

    async def purge(self) -> None:
        """Delete the records out of the window."""
        self._last_purge = self._clock()
        async with self.database.connection("purge old idempotency keys") as conn:
            await conn.execute(
                "DELETE FROM idempotency_keys WHERE created_at <= now() - %(window)s * interval '1 second'",
                {"window": self.window_s},
            )
