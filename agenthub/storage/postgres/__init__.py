"""The PostgreSQL backend of `[store] backend = "postgres"` (design §12): schema and migrations, the pool, stores."""

from agenthub.storage.postgres.database import Database, open_database
from agenthub.storage.postgres.schema import SCHEMA_VERSION, apply_migrations
from agenthub.storage.postgres.sessions import PostgresSessionStore, lazy_postgres_store, postgres_store_factory

__all__ = [
    "SCHEMA_VERSION",
    "Database",
    "PostgresSessionStore",
    "apply_migrations",
    "lazy_postgres_store",
    "open_database",
    "postgres_store_factory",
]
