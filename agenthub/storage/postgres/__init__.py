"""The PostgreSQL backend of `[store] backend = "postgres"` (design §12): schema and migrations, the pool, stores."""

from agenthub.storage.postgres.database import Database, open_database
from agenthub.storage.postgres.inbox import PostgresInbox
from agenthub.storage.postgres.jobs import PostgresJobs
from agenthub.storage.postgres.leases import PostgresLeases
from agenthub.storage.postgres.memory import PostgresMemoryStore
from agenthub.storage.postgres.outbox import PostgresOutbox
from agenthub.storage.postgres.schema import SCHEMA_VERSION, apply_migrations
from agenthub.storage.postgres.seen import PostgresSeenIds
from agenthub.storage.postgres.sessions import PostgresSessionStore, lazy_postgres_store, postgres_store_factory
from agenthub.storage.postgres.tokens import PostgresTokens

__all__ = [
    "SCHEMA_VERSION",
    "Database",
    "PostgresInbox",
    "PostgresJobs",
    "PostgresLeases",
    "PostgresMemoryStore",
    "PostgresOutbox",
    "PostgresSeenIds",
    "PostgresSessionStore",
    "PostgresTokens",
    "apply_migrations",
    "lazy_postgres_store",
    "open_database",
    "postgres_store_factory",
]
