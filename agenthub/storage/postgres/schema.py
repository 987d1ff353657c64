"""The PostgreSQL schema as numbered migrations, applied in one transaction under an advisory lock."""

from __future__ import annotations

from dataclasses import dataclass

import structlog
from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from agenthub.errors import StorageError
from agenthub.storage.postgres.schema_append_let_go import APPEND_LET_GO_SQL, APPEND_LET_GO_WHAT
from agenthub.storage.postgres.schema_claim_ride import CLAIM_RIDE_SQL, CLAIM_RIDE_WHAT
from agenthub.storage.postgres.schema_forgotten import USAGE_FORGOTTEN_SQL, USAGE_FORGOTTEN_WHAT
from agenthub.storage.postgres.schema_lease_asked import LEASE_ASKED_SQL, LEASE_ASKED_WHAT
from agenthub.storage.postgres.schema_memory_clock import MEMORY_CLOCK_SQL, MEMORY_CLOCK_WHAT
from agenthub.storage.postgres.schema_reserve_set import RESERVE_SET_SQL, RESERVE_SET_WHAT
from agenthub.storage.postgres.schema_search import SEARCH_PACKED_SQL, SEARCH_PACKED_WHAT
from agenthub.storage.postgres.schema_search_index import (
    SEARCH_CACHES_SQL,
    SEARCH_CACHES_WHAT,
    SEARCH_DOC_TERMS_SQL,
    SEARCH_DOC_TERMS_WHAT,
    SEARCH_INDEX_SQL,
    SEARCH_INDEX_WHAT,
    SEARCH_REMOVALS_SQL,
    SEARCH_REMOVALS_WHAT,
    SEARCH_VECTORS_SQL,
    SEARCH_VECTORS_WHAT,
)
from agenthub.storage.postgres.schema_search_names import SEARCH_NAMES_SQL, SEARCH_NAMES_WHAT
from agenthub.storage.postgres.schema_session_calls import (
    SESSION_CLAIMS_SQL,
    SESSION_CLAIMS_WHAT,
    SESSION_WRITES_SQL,
    SESSION_WRITES_WHAT,
)
from agenthub.storage.postgres.schema_tables import (
    COPIES_AND_SENDS_SQL,
    COPIES_AND_SENDS_WHAT,
    IDEMPOTENCY_KEYS_SQL,
    IDEMPOTENCY_KEYS_WHAT,
    INBOX_OWNERS_SQL,
    INBOX_OWNERS_WHAT,
    JOBS_AND_OUTBOX_SQL,
    JOBS_AND_OUTBOX_WHAT,
    SESSIONS_SQL,
    SESSIONS_WHAT,
    SHARED_STATE_SQL,
    SHARED_STATE_WHAT,
    TURNS_SQL,
    TURNS_WHAT,
)
from agenthub.storage.postgres.schema_usage import (
    USAGE_NAMES_SQL,
    USAGE_NAMES_WHAT,
    USAGE_RESERVE_EXCEPT_SQL,
    USAGE_RESERVE_EXCEPT_WHAT,
    USAGE_TOTALS_SQL,
    USAGE_TOTALS_WHAT,
)
from agenthub.storage.postgres.schema_usage_add import USAGE_ADD_SQL, USAGE_ADD_WHAT
from agenthub.storage.postgres.schema_usage_days import (
    USAGE_RESERVE_CLAIMS_SQL,
    USAGE_RESERVE_CLAIMS_WHAT,
    USAGE_RESERVE_FORGOTTEN_SQL,
    USAGE_RESERVE_FORGOTTEN_WHAT,
    USAGE_SQL,
    USAGE_WHAT,
)

log = structlog.get_logger(__name__)

MIGRATION_LOCK = 0x61_67_65_6E_74_68_75_62  # "agenthub": one advisory lock id for every instance of the product
"""Two instances starting together: the second waits for the first's migrations, then finds nothing to do."""


@dataclass(frozen=True)
class Migration:
    version: int
    what: str
    sql: tuple[str, ...]


SESSIONS = Migration(1, SESSIONS_WHAT, SESSIONS_SQL)
"""Migration 1 (`schema_tables`): session histories, archives and meta."""

SHARED_STATE = Migration(2, SHARED_STATE_WHAT, SHARED_STATE_SQL)
"""Migration 2 (`schema_tables`): memory files, the inbox, leases, dedup memory and API tokens."""

TURNS = Migration(3, TURNS_WHAT, TURNS_SQL)
"""Migration 3 (`schema_tables`): session fences and the session of each inbox entry."""

INBOX_OWNERS = Migration(4, INBOX_OWNERS_WHAT, INBOX_OWNERS_SQL)
"""Migration 4 (`schema_tables`): the instance answering each inbox entry."""

JOBS_AND_OUTBOX = Migration(5, JOBS_AND_OUTBOX_WHAT, JOBS_AND_OUTBOX_SQL)
"""Migration 5 (`schema_tables`): scheduled jobs and the outbox of sends for another instance's connection."""

COPIES_AND_SENDS = Migration(6, COPIES_AND_SENDS_WHAT, COPIES_AND_SENDS_SQL)
"""Migration 6 (`schema_tables`): what store migrate copied, and the per-member send counts (WeCom)."""

SEARCH_INDEX = Migration(7, SEARCH_INDEX_WHAT, SEARCH_INDEX_SQL)
"""Migration 7 (`schema_search_index`): the memory_search index every instance shares."""

USAGE = Migration(8, USAGE_WHAT, USAGE_SQL)
"""Migration 8 (`schema_usage_days`): model usage per call and per day, budget reservations and warnings."""

IDEMPOTENCY_KEYS = Migration(9, IDEMPOTENCY_KEYS_WHAT, IDEMPOTENCY_KEYS_SQL)
"""Migration 9 (`schema_tables`): the HTTP API's idempotency keys."""

SEARCH_VECTORS = Migration(10, SEARCH_VECTORS_WHAT, SEARCH_VECTORS_SQL)
"""Migration 10 (`schema_search_index`): one vector per searchable message."""

USAGE_RESERVE_FORGOTTEN = Migration(11, USAGE_RESERVE_FORGOTTEN_WHAT, USAGE_RESERVE_FORGOTTEN_SQL)
"""Migration 11 (`schema_usage_days`): `usage_reserve` again, its `user` scope matching the sender's id or their
forget tag (`Person.tag`): a forget leaves their day's and month's usage counted against their own budget."""

SEARCH_CACHES = Migration(12, SEARCH_CACHES_WHAT, SEARCH_CACHES_SQL)
"""Migration 12 (`schema_search_index`): what lets an instance keep search data in memory and rank the top hits."""

SESSION_WRITES = Migration(13, SESSION_WRITES_WHAT, SESSION_WRITES_SQL)
"""Migration 13 (`schema_session_calls`): a fenced session write in one round trip (append, fence, meta)."""

SEARCH_REMOVALS = Migration(14, SEARCH_REMOVALS_WHAT, SEARCH_REMOVALS_SQL)
"""Migration 14 (`schema_search_index`): the search docs each removal took away."""

USAGE_RESERVE_CLAIMS = Migration(16, USAGE_RESERVE_CLAIMS_WHAT, USAGE_RESERVE_CLAIMS_SQL)
"""Migration 16 (`schema_usage_days`): a budget check in one cheap call; `usage_reserve` (migrations 8 and 11)
stays for instances not upgraded yet."""

USAGE_TOTALS = Migration(17, USAGE_TOTALS_WHAT, USAGE_TOTALS_SQL)
"""Migration 17 (`schema_usage`): the running usage totals the budget check reads."""

SEARCH_DOC_TERMS = Migration(18, SEARCH_DOC_TERMS_WHAT, SEARCH_DOC_TERMS_SQL)
"""Migration 18 (`schema_search_index`): each search doc keeps its distinct terms."""

SESSION_CLAIMS = Migration(19, SESSION_CLAIMS_WHAT, SESSION_CLAIMS_SQL)
"""Migration 19 (`schema_session_calls`): a session's lease, fence, new records and meta in one round trip;
`agenthub_session_append` (migration 13) stays for instances not upgraded yet."""

USAGE_NAMES = Migration(20, USAGE_NAMES_WHAT, USAGE_NAMES_SQL)
"""Migration 20 (`schema_usage`): the senders' display names of the usage views."""

SEARCH_PACKED = Migration(21, SEARCH_PACKED_WHAT, SEARCH_PACKED_SQL)
"""Migration 21 (`schema_search`): postings packed per term in blocks, docs pending until packed."""

USAGE_RESERVE_EXCEPT = Migration(22, USAGE_RESERVE_EXCEPT_WHAT, USAGE_RESERVE_EXCEPT_SQL)
"""Migration 22 (`schema_usage`): the budget check leaving out an instance's settled reservations whose usage it
stored (instead of writing their release first)."""

USAGE_FORGOTTEN = Migration(23, USAGE_FORGOTTEN_WHAT, USAGE_FORGOTTEN_SQL)
"""Migration 23 (`schema_forgotten`): forget marks every usage write checks."""

SEARCH_NAMES = Migration(24, SEARCH_NAMES_WHAT, SEARCH_NAMES_SQL)
"""Migration 24 (`schema_search_names`): a block's postings name their source and channel by a per-agent code."""

MEMORY_CLOCK = Migration(25, MEMORY_CLOCK_WHAT, MEMORY_CLOCK_SQL)
"""Migration 25 (`schema_memory_clock`): the memory files' version, which a turn learns with its history append."""

CLAIM_RIDE = Migration(26, CLAIM_RIDE_WHAT, CLAIM_RIDE_SQL)
"""Migration 26 (`schema_claim_ride`): a session's claim with a turn's budget reservation riding in it."""

LEASE_ASKED = Migration(27, LEASE_ASKED_WHAT, LEASE_ASKED_SQL)
"""Migration 27 (`schema_lease_asked`): a lease's release announced only when another instance asked for it."""

RESERVE_SET = Migration(28, RESERVE_SET_WHAT, RESERVE_SET_SQL)
"""Migration 28 (`schema_reserve_set`): the budget check and reservation in two statements (beside migration 22's)."""

APPEND_LET_GO = Migration(29, APPEND_LET_GO_WHAT, APPEND_LET_GO_SQL)
"""Migration 29 (`schema_append_let_go`): a session let go in the statement that writes its turn's answer."""

USAGE_ADD = Migration(30, USAGE_ADD_WHAT, USAGE_ADD_SQL)
"""Migration 30 (`schema_usage_add`): a usage write (calls, roll-ups, totals, reservations ended) in one call."""

MIGRATIONS: tuple[Migration, ...] = (
    SESSIONS,
    SHARED_STATE,
    TURNS,
    INBOX_OWNERS,
    JOBS_AND_OUTBOX,
    COPIES_AND_SENDS,
    SEARCH_INDEX,
    USAGE,
    IDEMPOTENCY_KEYS,
    SEARCH_VECTORS,
    USAGE_RESERVE_FORGOTTEN,
    SEARCH_CACHES,
    SESSION_WRITES,
    SEARCH_REMOVALS,
    USAGE_RESERVE_CLAIMS,
    USAGE_TOTALS,
    SEARCH_DOC_TERMS,
    SESSION_CLAIMS,
    USAGE_NAMES,
    SEARCH_PACKED,
    USAGE_RESERVE_EXCEPT,
    USAGE_FORGOTTEN,
    SEARCH_NAMES,
    MEMORY_CLOCK,
    CLAIM_RIDE,
    LEASE_ASKED,
    RESERVE_SET,
    APPEND_LET_GO,
    USAGE_ADD,
)
"""Append only, never edit a released one."""
SCHEMA_VERSION = MIGRATIONS[-1].version

_VERSION_TABLE = """CREATE TABLE IF NOT EXISTS schema_version (
    version integer PRIMARY KEY,
    what text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""


class SchemaTooNewError(StorageError):
    """The database was migrated by a newer AgentHub than this one."""


async def apply_migrations(conn: AsyncConnection[TupleRow]) -> list[int]:
    """Bring the schema to `SCHEMA_VERSION` in one transaction; the versions applied ([] when it was current)."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        await conn.execute(_VERSION_TABLE)
        current = await _current_version(conn)
        if current > SCHEMA_VERSION:
            raise SchemaTooNewError(
                f"the database schema is version {current}, newer than this AgentHub's {SCHEMA_VERSION}: upgrade it"
            )
        applied = []
        for migration in MIGRATIONS:
            if migration.version > current:
                for statement in migration.sql:
                    await conn.execute(statement)
                await conn.execute(
                    "INSERT INTO schema_version (version, what) VALUES (%s, %s)", (migration.version, migration.what)
                )
                applied.append(migration.version)
    if applied:
        log.info("store_schema_migrated", from_version=current, to_version=SCHEMA_VERSION)
    return applied


async def _current_version(conn: AsyncConnection[TupleRow]) -> int:
    cursor = await conn.execute("SELECT coalesce(max(version), 0) FROM schema_version")
    row = await cursor.fetchone()
    return int(row[0]) if row is not None else 0
