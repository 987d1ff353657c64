"""`Stores`: every store of one deployment, built once from `[store]` by its backend's factory (`files_backend`,
`postgres.backend`); `open_stores` picks the factory by the `[store] backend` name, the only place it is read."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from agenthub.storage.latency import Latency
from agenthub.storage.singleton import instance_holder

if TYPE_CHECKING:
    from agenthub.config import Backend, Settings
    from agenthub.storage.dedup import SeenIdsOpener
    from agenthub.storage.member_sends import MemberSendsOpener
    from agenthub.storage.ports import (
        IdempotencyStore,
        Inbox,
        JobDocuments,
        LeaseStore,
        MemoryStore,
        Outbox,
        SearchPort,
        SessionStore,
        Tokens,
        UsageStore,
        VectorStore,
    )


class Stores:
    """Sessions, memory files, the inbox, leases, dedup memories, scheduled jobs, usage, API tokens, the search
    index and (shared stores) the outbox, as the ports of `ports/`; a backend subclasses it for what it opens on
    demand. The files inbox opens its journal on first use, so code that never asks for it never touches
    `data/.inbox.jsonl`."""

    shared_between_instances = False
    """True when several instances use these stores at once (their inbox, leases and counts are shared)."""

    def __init__(
        self,
        backend: Backend,
        *,
        sessions: SessionStore,
        memory: MemoryStore,
        leases: LeaseStore,
        data_dir: Path,
        jobs: JobDocuments,
        usage: UsageStore,
        tokens: Tokens,
        search: SearchPort,
        outbox: Outbox | None = None,
        holder: str | None = None,
    ) -> None:
        """`holder`: this instance's lease holder id (default: a new one), the owner of what it accepts."""
        self.backend = backend
        """The backend's name, for what the instance reports (`/readyz`); nothing branches on it."""
        self.sessions, self.memory, self.leases = sessions, memory, leases
        self.data_dir = data_dir
        self.jobs = jobs
        """Every agent's scheduled jobs: `data/<agent>/jobs.json`, or the table `jobs` shared by every instance."""
        self.usage = usage
        """Model usage and budget reservations: `data/usage/`, or tables shared by every instance (design §15)."""
        self.tokens = tokens
        """The HTTP API's tokens: `auth/tokens.json`, or the table every instance reads."""
        self.search = search
        """The memory_search index the backend keeps (per agent beside the files, or shared in the database)."""
        self.outbox = outbox
        """Sends for the instance holding a connection (shared stores); None where one instance holds all."""
        self.holder = holder or instance_holder()
        self._inbox: Inbox | None = None
        self._idempotency: IdempotencyStore | None = None

    def idempotency(self, window_s: float) -> IdempotencyStore:
        """The HTTP API's idempotency keys (kept `window_s`), opened once."""
        if self._idempotency is None:
            self._idempotency = self._open_idempotency(window_s)
        return self._idempotency

    def _open_idempotency(self, window_s: float) -> IdempotencyStore:
        raise NotImplementedError

    @property
    def inbox(self) -> Inbox:
        if self._inbox is None:
            self._inbox = self._open_inbox()
        return self._inbox

    def _open_inbox(self) -> Inbox:
        raise NotImplementedError

    def open_vectors(self) -> VectorStore:
        """The `[search.embeddings]` vectors' store (opened on demand: the files' one starts a worker thread)."""
        raise NotImplementedError

    def seen_ids_for(self, channel: str, state_dir: Path) -> SeenIdsOpener:
        """How channel `channel` opens its dedup memories (files in `state_dir`, or shared scopes)."""
        raise NotImplementedError

    def member_sends_for(self, channel: str) -> MemberSendsOpener | None:
        """How channel `channel` opens per-member send counts shared by every instance; None: each process counts
        its own (one instance)."""
        return None

    async def running_instances(self) -> list[str]:
        """The holders of live `instance:` leases of other processes using these stores ([]: one instance, whose
        data directory lock keeps the others out)."""
        return []

    @property
    def latency(self) -> Latency | None:
        """The store calls' latency (None: the turn's own figures measure them)."""
        return None

    async def reachable(self) -> bool:
        """True when the store can be used now."""
        return True

    async def aclose(self) -> None:
        if self._inbox is not None:
            await self._inbox.aclose()


BackendFactory = Callable[["Settings"], Awaitable[Stores]]


def _files(settings: Settings) -> Awaitable[Stores]:
    from agenthub.storage.files_backend import open_backend

    return open_backend(settings)


def _postgres(settings: Settings) -> Awaitable[Stores]:
    from agenthub.storage.postgres.backend import open_backend

    return open_backend(settings)


BACKENDS: dict[Backend, BackendFactory] = {"files": _files, "postgres": _postgres}
"""`[store] backend` → its factory (imported on use: the database driver loads only for PostgreSQL)."""


async def open_stores(settings: Settings) -> Stores:
    """The stores `[store]` names; on PostgreSQL the schema is migrated and the pool connected first, so a wrong
    DSN or an unreachable server is a StorageError with one clear line (never the DSN) before anything starts."""
    return await BACKENDS[settings.store.backend](settings)
