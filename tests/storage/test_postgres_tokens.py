"""API tokens on PostgreSQL: a configured token is known without a round trip; a stored one is read at each
request, so a revoke on any instance counts at the next one."""

from __future__ import annotations

from agenthub.storage.postgres import PostgresTokens
from agenthub.storage.postgres.database import open_database

CONFIGURED = "configured-token-0123456789abcdef"


async def test_a_configured_token_needs_no_round_trip_and_a_revoked_stored_one_is_refused_at_once(
    postgres_dsn: str,
) -> None:
    database = await open_database(postgres_dsn)
    other = await open_database(postgres_dsn)
    try:
        tokens, elsewhere = PostgresTokens(database, [CONFIGURED]), PostgresTokens(other)
        stored = await elsewhere.create("phone")
        trips = database.latency.count
        assert await tokens.identify(CONFIGURED) == "config-1"
        assert database.latency.count == trips
        assert await tokens.identify(stored) == "phone"
        assert await tokens.identify("not-a-token") is None
        assert await elsewhere.revoke("phone")
        assert await tokens.identify(stored) is None
    finally:
        await database.close()
        await other.close()
