"""`Stores`: every store of one deployment, built once from `[store]`: today's files (one instance per data
directory) or PostgreSQL (one pool shared by all of them, the state shared by every instance)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from agenthub.storage.dedup import DedupStore, SeenIdsOpener
from agenthub.storage.files import FileSessionStore
from agenthub.storage.idempotency import FileIdempotency
from agenthub.storage.inbox import FileInbox
from agenthub.storage.jobs import FileJobDocuments
from agenthub.storage.latency import Latency
from agenthub.storage.lease import InProcessLeases
from agenthub.storage.member_sends import MemberSendsOpener, Windows
from agenthub.storage.memory_files import FileMemoryStore
from agenthub.storage.ports import (
    IdempotencyStore,
    Inbox,
    JobDocuments,
    LeaseStore,
    MemberSends,
    MemoryStore,
    Outbox,
    SeenIds,
    SessionStore,
    UsageStore,
)
from agenthub.storage.singleton import instance_holder
from agenthub.storage.usage import FileUsageStore

if TYPE_CHECKING:
    from agenthub.config import Settings
    from agenthub.storage.postgres import Database, PostgresTokens
    from agenthub.storage.postgres.search import PostgresSearchIndex
    from agenthub.storage.postgres.search_sync import PostgresIndexFeed

Backend = Literal["files", "postgres"]


class Stores:
    """Sessions, memory files, the inbox, leases, dedup memories, scheduled jobs and (postgres) API tokens and the
    outbox. The files inbox opens
    its journal on first use, so code that never asks for it never touches `data/.inbox.jsonl`."""

    def __init__(
        self,
        backend: Backend,
        *,
        sessions: SessionStore,
        memory: MemoryStore,
        leases: LeaseStore,
        data_dir: Path,
        jobs: JobDocuments | None = None,
        outbox: Outbox | None = None,
        database: Database | None = None,
        tokens: PostgresTokens | None = None,
        search_index: PostgresSearchIndex | None = None,
        search_feed: PostgresIndexFeed | None = None,
        fsync: bool = True,
        holder: str | None = None,
        usage: UsageStore | None = None,
    ) -> None:
        """`holder`: this instance's lease holder id (default: a new one), the owner of what it accepts."""
        self.backend = backend
        self.sessions, self.memory, self.leases = sessions, memory, leases
        self.data_dir = data_dir
        self.jobs: JobDocuments = jobs if jobs is not None else FileJobDocuments(data_dir, durable=fsync)
        """Every agent's scheduled jobs: `data/<agent>/jobs.json`, or the table `jobs` shared by every instance."""
        self.outbox = outbox
        self.usage: UsageStore = usage if usage is not None else FileUsageStore(data_dir)
        """Model usage and budget reservations: `data/usage/`, or tables shared by every instance (design §15)."""
        """Sends for the instance holding a connection (postgres); None in the files mode, where one holds all."""
        self.database = database
        self.tokens = tokens
        """The API tokens on PostgreSQL; None in the files mode (`TokenStore` reads `auth/tokens.json`)."""
        self.search_index = search_index
        """The memory_search index every instance shares (postgres); None: the files keep one per agent beside
        the data (`agenthub.search.service.SearchService`)."""
        self.search_feed = search_feed
        """Reads the shared store's histories and memory files into `search_index` (postgres); None on the files."""
        self.holder = holder or instance_holder()
        self._inbox: Inbox | None = None
        self._fsync = fsync
        self._idempotency: IdempotencyStore | None = None

    def idempotency(self, window_s: float) -> IdempotencyStore:
        """The HTTP API's idempotency keys (kept `window_s`): `data/.idempotency/`, or the table every instance
        shares."""
        if self._idempotency is None:
            if self.database is None:
                self._idempotency = FileIdempotency(self.data_dir, window_s=window_s, fsync=self._fsync)
            else:
                from agenthub.storage.postgres.idempotency import PostgresIdempotency

                self._idempotency = PostgresIdempotency(self.database, window_s=window_s)
        return self._idempotency

    @property
    def inbox(self) -> Inbox:
        if self._inbox is None:
            self._inbox = self._open_inbox()
        return self._inbox

    def _open_inbox(self) -> Inbox:
        """Files: this instance's journal. PostgreSQL: the inbox every instance shares, this instance owning what
        it accepts; a survivor claims a stopped instance's entries once its `instance:` lease is gone
        (`inbox_flow.InstanceInbox`), so nobody answers what a live instance is answering."""
        if self.database is None:
            return FileInbox(self.data_dir, fsync=self._fsync)
        from agenthub.storage.postgres import PostgresInbox

        return PostgresInbox(self.database, owner=self.holder)

    def seen_ids_for(self, channel: str, state_dir: Path) -> SeenIdsOpener:
        """How channel `channel` opens its dedup memories: files in `state_dir`, or its scopes of `seen_ids`."""
        database = self.database
        if database is None:
            return lambda name, ttl_s: DedupStore(state_dir / name, ttl_s=ttl_s)

        def shared(name: str, ttl_s: float) -> SeenIds:
            from agenthub.storage.postgres import PostgresSeenIds

            return PostgresSeenIds(database, f"{channel}/{name}", ttl_s=ttl_s)

        return shared

    def member_sends_for(self, channel: str) -> MemberSendsOpener | None:
        """How channel `channel` opens its per-member send counts: shared by every instance in `member_sends`
        (postgres), or None: each process counts its own (files, one instance)."""
        database = self.database
        if database is None:
            return None

        def shared(name: str, windows: Windows) -> MemberSends:
            from agenthub.storage.postgres.sends import PostgresMemberSends

            return PostgresMemberSends(database, f"{channel}/{name}", windows)

        return shared

    @property
    def latency(self) -> Latency | None:
        """The store calls' latency (postgres; the files are measured by the turn's own figures)."""
        return None if self.database is None else self.database.latency

    async def reachable(self) -> bool:
        """True when the store can be used now (the files: always; the database: a round trip succeeds)."""
        return True if self.database is None else await self.database.reachable()

    async def aclose(self) -> None:
        if self._inbox is not None:
            await self._inbox.aclose()
        if self.database is not None:
            await self.database.close()


def file_stores(settings: Settings) -> Stores:
    """Today's files of design §4."""
    return Stores(
        "files",
        sessions=FileSessionStore(settings.data_dir, fsync=settings.session.fsync),
        memory=FileMemoryStore(settings.data_dir, settings.auth_dir),
        leases=InProcessLeases(),
        data_dir=settings.data_dir,
        fsync=settings.session.fsync,
    )


async def open_stores(settings: Settings) -> Stores:
    """The stores `[store]` names; on PostgreSQL the schema is migrated and the pool connected first, so a wrong
    DSN or an unreachable server is a StorageError with one clear line (never the DSN) before anything starts."""
    if settings.store.backend == "files" or settings.store.dsn is None:
        return file_stores(settings)
    from agenthub.storage.postgres import (
        PostgresJobs,
        PostgresLeases,
        PostgresMemoryStore,
        PostgresOutbox,
        PostgresSessionStore,
        PostgresTokens,
        open_database,
    )
    from agenthub.storage.postgres.search import PostgresSearchIndex
    from agenthub.storage.postgres.search_sync import PostgresIndexFeed
    from agenthub.storage.postgres.usage import PostgresUsageStore

    database = await open_database(settings.store.dsn.get_secret_value())
    extra_tokens = [t.get_secret_value() for t in settings.http.tokens]
    return Stores(
        "postgres",
        sessions=PostgresSessionStore(database),
        memory=PostgresMemoryStore(database),
        leases=PostgresLeases(database),
        data_dir=settings.data_dir,
        jobs=PostgresJobs(database),
        outbox=PostgresOutbox(database),
        database=database,
        tokens=PostgresTokens(database, extra_tokens),
        search_index=PostgresSearchIndex(database),
        search_feed=PostgresIndexFeed(database),
        usage=PostgresUsageStore(database),
    )
