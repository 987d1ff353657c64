"""`PostgresSeenIds`: a channel's dedup memory shared by every instance, so a platform's redelivery to another
instance is still a duplicate. Rows carry their expiry; expired ones are purged lazily, now and then."""

from __future__ import annotations

import time
from collections.abc import Callable

from agenthub.storage.postgres.database import Database

PURGE_EVERY_S = 60.0

_CHECK_AND_ADD = """
INSERT INTO seen_ids AS s (scope, key, expires_at)
VALUES (%(scope)s, %(key)s, now() + %(ttl)s * interval '1 second')
ON CONFLICT (scope, key) DO UPDATE SET expires_at = EXCLUDED.expires_at WHERE s.expires_at <= now()
RETURNING 1
"""
"""One statement: a row comes back when the id is new (inserted) or its memory had expired (renewed); none when
another call, on any instance, remembered it within the TTL."""


class PostgresSeenIds:
    """The `SeenIds` of one dedup memory (`scope`, e.g. `wecom/app-1.dedup`) in the table `seen_ids`.
    `check_and_add` returns once the id is committed; a database failure raises StorageError."""

    def __init__(
        self, database: Database, scope: str, *, ttl_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.database = database
        self.scope = scope
        self._ttl_s = ttl_s
        self._clock = clock
        self._last_purge = clock()
        self._size = 0

    @property
    def ttl_s(self) -> float:
        return self._ttl_s

    def __len__(self) -> int:
        """About how many ids are remembered: the count at the last purge plus this instance's new ids since."""
        return self._size

    async def check_and_add(self, key: str) -> bool:
        params = {"scope": self.scope, "key": key, "ttl": self._ttl_s}
        async with self.database.connection("check a message id") as conn:
            cursor = await conn.execute(_CHECK_AND_ADD, params)
            new = await cursor.fetchone() is not None
        if new:
            self._size += 1
        if self._clock() - self._last_purge >= PURGE_EVERY_S:
            await self.purge()
        return not new

    async def forget(self, key: str) -> None:
        async with self.database.connection("forget a message id") as conn:
            cursor = await conn.execute(
                "DELETE FROM seen_ids WHERE scope = %(scope)s AND key = %(key)s", {"scope": self.scope, "key": key}
            )
        if cursor.rowcount > 0:
            self._size = max(0, self._size - 1)

    async def purge(self) -> int:
        """Delete this memory's expired ids; how many are left."""
        self._last_purge = self._clock()
        async with self.database.connection("purge expired message ids") as conn:
            await conn.execute(
                "DELETE FROM seen_ids WHERE scope = %(scope)s AND expires_at <= now()", {"scope": self.scope}
            )
            cursor = await conn.execute("SELECT count(*) FROM seen_ids WHERE scope = %(scope)s", {"scope": self.scope})
            row = await cursor.fetchone()
        self._size = int(row[0]) if row is not None else 0
        return self._size
