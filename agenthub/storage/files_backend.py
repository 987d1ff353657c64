"""The files backend (design §4): one instance per data directory, every port over files under `data/` and
`auth/`; the memory_search index per agent beside the data (`data/<agent>/index/`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agenthub.storage.dedup import DedupStore, SeenIdsOpener
from agenthub.storage.files import FileSessionStore
from agenthub.storage.idempotency import FileIdempotency
from agenthub.storage.inbox import FileInbox
from agenthub.storage.jobs import FileJobDocuments
from agenthub.storage.lease import InProcessLeases
from agenthub.storage.memory_files import FileMemoryStore
from agenthub.storage.ports import IdempotencyStore, Inbox, VectorStore
from agenthub.storage.search_files_feed import FilesSearch
from agenthub.storage.search_vectors import FileVectorStore
from agenthub.storage.stores import Stores
from agenthub.storage.tokens import FileTokens, TokenStore
from agenthub.storage.usage_files import FileUsageStore

if TYPE_CHECKING:
    from agenthub.config import Settings


class FileStores(Stores):
    """The stores of one data directory, this instance their only user."""

    def __init__(self, settings: Settings) -> None:
        data_dir, fsync = settings.data_dir, settings.session.fsync
        self._sessions = FileSessionStore(data_dir, fsync=fsync)
        super().__init__(
            "files",
            sessions=self._sessions,
            memory=FileMemoryStore(data_dir, settings.auth_dir),
            leases=InProcessLeases(),
            data_dir=data_dir,
            jobs=FileJobDocuments(data_dir, durable=fsync),
            usage=FileUsageStore(data_dir),
            tokens=FileTokens(TokenStore(settings.auth_dir, [t.get_secret_value() for t in settings.http.tokens])),
            search=FilesSearch(data_dir),
        )
        self._fsync = fsync

    def _open_idempotency(self, window_s: float) -> IdempotencyStore:
        """`data/.idempotency/`."""
        return FileIdempotency(self.data_dir, window_s=window_s, fsync=self._fsync)

    def _open_inbox(self) -> Inbox:
        """This instance's journal, `data/.inbox.jsonl`, appended through the histories' commit log (one group
        commit for the inbox's records and the histories' lines)."""
        return FileInbox(self.data_dir, fsync=self._fsync, writer=self._sessions.writer)

    async def recover(self) -> None:
        """Bring the history files up to date from the commit log (`FileSessionStore.recover`)."""
        await self._sessions.recover()

    async def aclose(self) -> None:
        """The inbox first, then the histories' commit log checkpointed (a clean stop leaves it empty)."""
        await super().aclose()
        await self._sessions.aclose()

    def open_vectors(self) -> VectorStore:
        return FileVectorStore(self.data_dir)

    def seen_ids_for(self, channel: str, state_dir: Path) -> SeenIdsOpener:
        return lambda name, ttl_s: DedupStore(state_dir / name, ttl_s=ttl_s)


async def open_backend(settings: Settings) -> Stores:
    """Today's files of design §4: the history commit log a crash left is replayed now, before anything reads the
    histories (the search feed reads their files directly); nothing else is opened until asked for."""
    stores = FileStores(settings)
    await stores.recover()
    return stores
