"""The PostgreSQL backend: one pool shared by every store, the state shared by every instance of the deployment,
the memory_search index in tables every instance reads."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agenthub.errors import ConfigError
from agenthub.storage.dedup import SeenIdsOpener
from agenthub.storage.latency import Latency
from agenthub.storage.lease import INSTANCE_LEASE_PREFIX
from agenthub.storage.member_sends import MemberSendsOpener, Windows
from agenthub.storage.ports import IdempotencyStore, Inbox, MemberSends, SearchKit, SeenIds, VectorStore
from agenthub.storage.postgres.database import Database, open_database
from agenthub.storage.postgres.idempotency import PostgresIdempotency
from agenthub.storage.postgres.inbox import PostgresInbox
from agenthub.storage.postgres.jobs import PostgresJobs
from agenthub.storage.postgres.leases import PostgresLeases
from agenthub.storage.postgres.memory import PostgresMemoryStore
from agenthub.storage.postgres.memory_clock import MemoryClock
from agenthub.storage.postgres.outbox import PostgresOutbox
from agenthub.storage.postgres.search import PostgresSearchIndex
from agenthub.storage.postgres.search_sync import PostgresIndexFeed
from agenthub.storage.postgres.search_vectors import PostgresVectorStore
from agenthub.storage.postgres.seen import PostgresSeenIds
from agenthub.storage.postgres.sends import PostgresMemberSends
from agenthub.storage.postgres.sessions import PostgresSessionStore
from agenthub.storage.postgres.tokens import PostgresTokens
from agenthub.storage.postgres.usage import PostgresUsageStore
from agenthub.storage.stores import Stores

if TYPE_CHECKING:
    from agenthub.config import Settings
    from agenthub.storage.ports import Built


class SharedSearch:
    """The database's search port: one index every instance shares, fed from the shared tables."""

    def __init__(self, database: Database) -> None:
        self.index = PostgresSearchIndex(database)
        self.feed = PostgresIndexFeed(database)

    def open(self, kit: SearchKit[Built]) -> Built:
        return kit.shared_index(self.index, self.feed)


class PostgresStores(Stores):
    """Every store on one pool; `database` for the storage package's own tools (copy, migrations) and tests."""

    shared_between_instances = True

    def __init__(self, database: Database, data_dir: Path, extra_tokens: list[str] | None = None) -> None:
        clock = MemoryClock()  # the history's appends tell it the memory version; the memory store reads it
        self.postgres_leases = PostgresLeases(database)
        self.postgres_sessions = PostgresSessionStore(database, clock)
        super().__init__(
            "postgres",
            sessions=self.postgres_sessions,
            memory=PostgresMemoryStore(database, clock),
            leases=self.postgres_leases,
            data_dir=data_dir,
            jobs=PostgresJobs(database),
            usage=PostgresUsageStore(database),
            tokens=PostgresTokens(database, extra_tokens),
            search=SharedSearch(database),
            outbox=PostgresOutbox(database),
        )
        self.database = database

    def _open_idempotency(self, window_s: float) -> IdempotencyStore:
        """The table every instance shares."""
        return PostgresIdempotency(self.database, window_s=window_s)

    def _open_inbox(self) -> Inbox:
        """The inbox every instance shares, this instance owning what it accepts; a survivor claims a stopped
        instance's entries once its `instance:` lease is gone (`inbox_flow.InstanceInbox`), so nobody answers what
        a live instance is answering. The history's appends settle the entries their records answer
        (`PostgresSessionStore.append_settling`)."""
        inbox = PostgresInbox(self.database, owner=self.holder)
        self.postgres_sessions.settle_answers_of(inbox)
        return inbox

    def open_vectors(self) -> VectorStore:
        return PostgresVectorStore(self.database)

    def seen_ids_for(self, channel: str, state_dir: Path) -> SeenIdsOpener:
        """The channel's scopes of `seen_ids`."""
        database = self.database

        def shared(name: str, ttl_s: float) -> SeenIds:
            return PostgresSeenIds(database, f"{channel}/{name}", ttl_s=ttl_s)

        return shared

    def member_sends_for(self, channel: str) -> MemberSendsOpener | None:
        """Shared by every instance in `member_sends`."""
        database = self.database

        def shared(name: str, windows: Windows) -> MemberSends:
            return PostgresMemberSends(database, f"{channel}/{name}", windows)

        return shared

    async def running_instances(self) -> list[str]:
        return await PostgresLeases(self.database).live_holders(INSTANCE_LEASE_PREFIX)

    @property
    def latency(self) -> Latency | None:
        return self.database.latency

    async def reachable(self) -> bool:
        return await self.database.reachable()

    async def aclose(self) -> None:
        await super().aclose()
        await self.postgres_sessions.close()  # the grants of claims cancelled by the shutdown given back first
        await self.postgres_leases.close()  # the renewal lane's thread and connection
        await self.database.close()


async def open_backend(settings: Settings) -> Stores:
    """The schema migrated and the pool connected first: a wrong DSN or an unreachable server is a StorageError
    with one clear line (never the DSN) before anything starts."""
    if settings.store.dsn is None:
        raise ConfigError("store.dsn is required when store.backend is 'postgres'")
    database = await open_database(settings.store.dsn.get_secret_value())
    return PostgresStores(database, settings.data_dir, [t.get_secret_value() for t in settings.http.tokens])
