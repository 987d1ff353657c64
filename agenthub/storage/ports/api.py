"""The HTTP API's ports: its idempotency keys (`IdempotencyStore`) and its tokens (`TokenCheck`, `Tokens`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agenthub.storage.idempotency import IdempotencyRecord
    from agenthub.storage.tokens import StoredToken


class IdempotencyStore(Protocol):
    """Keys are `(scope, key)`; a record older than `window_s` counts as absent (and is removed now and then)."""

    async def claim(self, scope: str, key: str, fingerprint: str) -> IdempotencyRecord | None:
        """Take the key for a new request: None when it is now this request's; else the live record of the
        request that has it (a taken key whose message was never stored is free again after `ACCEPT_GRACE_S`)."""
        ...

    async def get(self, scope: str, key: str) -> IdempotencyRecord | None: ...

    async def accepted(self, scope: str, key: str) -> None:
        """The request's message is stored: it will be answered, the key stays taken."""
        ...

    async def finish(self, scope: str, key: str, final: dict[str, Any]) -> None:
        """Keep the request's final reply event (JSON-ready) for the retries."""
        ...

    async def release(self, scope: str, key: str) -> None:
        """Free a key whose message was not stored (refused): a retry runs it."""
        ...


class TokenCheck(Protocol):
    """What the API's auth guard asks: `TokenStore` over `auth/tokens.json` (files) or `PostgresTokens`."""

    async def identify(self, token: str) -> str | None: ...

    async def has_tokens(self) -> bool: ...


class Tokens(TokenCheck, Protocol):
    """The HTTP API's tokens: `auth/tokens.json` (files) or the table every instance reads (PostgreSQL)."""

    async def stored(self) -> list[StoredToken]:
        """Every stored token (names and hashes, never a token)."""
        ...

    async def create(self, name: str) -> str:
        """A new token named `name`, returned once (ValueError for a bad or taken name)."""
        ...

    async def revoke(self, name: str) -> bool:
        """Delete the token `name`; False when there was none."""
        ...
