"""`FileSearchIndexStore`: the `SearchIndexStore` of the files backend, SQLite per agent on one worker thread.

The event loop never touches SQLite: every call is queued, in order, on the store's one worker thread, so a search
runs after every write queued before it. A database found broken in use is removed and reopened empty on the next
call (`on_open` then lets the indexer catch up from the files).
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import structlog

from agenthub.storage.paths import AgentLayout, refuse_link
from agenthub.storage.search_index import SearchDoc, SearchHit, SearchScope, SourceRef
from agenthub.storage.search_traffic import SearchTraffic

log = structlog.get_logger(__name__)

T = TypeVar("T")
OnOpen = Callable[[str, "SqliteSearchIndex"], None]

if TYPE_CHECKING:  # numpy with it: imported on the worker thread that opens an index, not at start-up
    from agenthub.storage.search_sqlite import SqliteSearchIndex


def index_path(layout: AgentLayout) -> Path:
    return layout.root / "index" / "search.sqlite3"


def remove_agent_index(data_dir: Path, agent: str) -> bool:
    """Remove `data/<agent>/index/` whole (it is derived from the files; the next open rebuilds it); False when there
    was none. Blocking: run it in a worker thread, never while a `FileSearchIndexStore` has the agent open."""
    directory = refuse_link(index_path(AgentLayout(data_dir, agent)).parent)
    if not directory.is_dir():
        return False
    shutil.rmtree(directory)
    return True


def _nothing(agent: str, index: SqliteSearchIndex) -> None:
    return None


class FileSearchIndexStore:
    """One SQLite index per agent under `data/<agent>/index/`, each used only from the store's worker thread."""

    def __init__(self, data_dir: Path, *, on_open: OnOpen = _nothing) -> None:
        self.data_dir = data_dir
        self.on_open = on_open
        """Called on the worker when an agent's index is opened (the files' indexer catches up there)."""
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="search-index")
        self._indexes: dict[str, SqliteSearchIndex] = {}  # worker thread only
        self.closing = threading.Event()
        self.traffic = SearchTraffic()
        """The searches running on the worker: every agent's merges give way to them (not to those queued: a purge
        ahead of them in the queue waits for the merge under way to end)."""

    # ---- the worker ----------------------------------------------------------------------------

    def index(self, agent: str) -> SqliteSearchIndex:
        """The agent's open index (worker thread only)."""
        index = self._indexes.get(agent)
        if index is None:
            from agenthub.storage.search_sqlite import SqliteSearchIndex

            index = self._indexes[agent] = SqliteSearchIndex(
                index_path(AgentLayout(self.data_dir, agent)), agent, traffic=self.traffic
            )
            self.on_open(agent, index)
        return index

    def guarded(self, agent: str, work: Callable[[SqliteSearchIndex], T]) -> T:
        """`work` on the agent's index (worker thread only); a broken database is removed and, once, built again
        from the files before `work` is tried again."""
        try:
            return work(self.index(agent))
        except sqlite3.DatabaseError:
            self.discard(agent)
            return work(self.index(agent))

    def discard(self, agent: str) -> None:
        log.exception("search_index_broken", agent=agent)
        index = self._indexes.pop(agent, None)
        if index is not None:
            from agenthub.storage.search_sqlite import remove_index_files

            index.close()
            remove_index_files(index.path)

    async def run(self, agent: str, work: Callable[[SqliteSearchIndex], T]) -> T:
        """`work` on the worker, after everything queued before."""
        if self.closing.is_set():
            raise RuntimeError("the search index is closed")
        return await asyncio.wrap_future(self._executor.submit(self.guarded, agent, work))

    def submit(self, work: Callable[[], object]) -> None:
        """Queue `work` on the worker, never wait for it (a failure is logged)."""
        if self.closing.is_set():
            return
        try:
            future = self._executor.submit(work)
        except RuntimeError:  # shut down meanwhile
            return
        future.add_done_callback(_log_failure)

    async def close(self) -> None:
        """Stop taking work, finish what is queued, close the connections."""
        self.closing.set()
        await asyncio.wrap_future(self._executor.submit(self._close_indexes))
        self._executor.shutdown(wait=False)

    def _close_indexes(self) -> None:
        for index in self._indexes.values():
            index.close()
        self._indexes.clear()

    # ---- the port ------------------------------------------------------------------------------

    async def add(self, agent: str, source: SourceRef, docs: Sequence[SearchDoc], watermark: str) -> None:
        await self.run(agent, lambda index: index.add(source, docs, watermark))

    async def replace_source(self, agent: str, source: SourceRef, docs: Sequence[SearchDoc], watermark: str) -> None:
        await self.run(agent, lambda index: index.replace_source(source, docs, watermark))

    async def drop_source(self, agent: str, source: SourceRef) -> None:
        await self.run(agent, lambda index: index.drop_source(source))

    async def drop_session(self, agent: str, session: str) -> None:
        await self.run(agent, lambda index: index.drop_session(session))

    async def watermarks(self, agent: str) -> dict[SourceRef, str]:
        return await self.run(agent, lambda index: index.watermarks())

    async def purge(self, agent: str) -> None:
        await self.run(agent, lambda index: index.purge())

    async def search(self, agent: str, terms: Sequence[str], scope: SearchScope, limit: int) -> list[SearchHit]:
        return await self.run(agent, lambda index: index.search(terms, scope, limit))


def _log_failure(future: Future[object]) -> None:
    if future.cancelled():
        return
    error = future.exception()
    if error is not None:
        log.error("search_index_update_failed", error_type=type(error).__name__, error=str(error))
