"""`PostgresTokens`: the HTTP API's token hashes (`auth/tokens.json` in the files mode) in the table `api_tokens`,
so a token created or revoked on one instance is known to every instance at its next request."""

from __future__ import annotations

import hmac
import secrets
import time

from agenthub.storage.postgres.database import Database
from agenthub.storage.tokens import CONFIG_TOKEN_NAME, TOKEN_PREFIX, StoredToken, check_new_name, hash_token


class PostgresTokens:
    """Stored tokens, only as SHA-256 hashes; `identify` compares in constant time against every one of them and
    the configured `extra_tokens`, like `TokenStore`."""

    def __init__(self, database: Database, extra_tokens: list[str] | None = None) -> None:
        self.database = database
        configured = [t for t in extra_tokens or [] if t]
        self._extra = [(f"{CONFIG_TOKEN_NAME}-{n}", hash_token(t)) for n, t in enumerate(configured, start=1)]

    async def stored(self) -> list[StoredToken]:
        async with self.database.connection("read the API tokens") as conn:
            cursor = await conn.execute("SELECT name, sha256, created_at FROM api_tokens ORDER BY created_at, name")
            rows = await cursor.fetchall()
        return [StoredToken(row[0], row[1], int(row[2])) for row in rows]

    async def add(self, token: StoredToken) -> bool:
        """Store an existing hash (`agenthub store migrate`); False when that name is taken already."""
        async with self.database.connection("store an API token") as conn:
            cursor = await conn.execute(
                "INSERT INTO api_tokens (name, sha256, created_at) VALUES (%s, %s, %s) ON CONFLICT (name) DO NOTHING",
                (token.name, token.sha256, token.created_at),
            )
        return cursor.rowcount > 0

    async def create(self, name: str) -> str:
        """Make a new token, store its hash under `name`, and return the token (shown once, never stored)."""
        check_new_name(name)
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        if not await self.add(StoredToken(name, hash_token(token), int(time.time()))):
            raise ValueError(f"a token named {name!r} already exists")
        return token

    async def revoke(self, name: str) -> bool:
        async with self.database.connection("revoke an API token") as conn:
            cursor = await conn.execute("DELETE FROM api_tokens WHERE name = %s", (name,))
        return cursor.rowcount > 0

    async def has_tokens(self) -> bool:
        return bool(self._extra or await self.stored())

    async def identify(self, token: str) -> str | None:
        """The token's name; a configured token (compared with each of them first) needs no round trip."""
        candidate = hash_token(token)
        found = _first_match(candidate, self._extra)
        if found is not None:
            return found
        return _first_match(candidate, [(t.name, t.sha256) for t in await self.stored()])


def _first_match(candidate: str, known: list[tuple[str, str]]) -> str | None:
    """The name of the first hash of `known` equal to `candidate`, every one compared (in constant time)."""
    found: str | None = None
    for name, sha256 in known:
        if hmac.compare_digest(candidate, sha256) and found is None:
            found = name
    return found
