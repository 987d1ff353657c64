"""The search service: every agent's index on one dedicated worker thread, fed by SessionHistory's observers.

The event loop never touches SQLite: history changes are handed to the worker as they land (fire and forget,
in order; appends gathered for `SYNC_DELAY_S`, so a busy session is read once per batch, not once per message), and a
search is queued behind them, so it sees every write that finished before it was asked.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import structlog

from agenthub.search.index import Hit, SearchIndex, SearchScope, remove_index_files
from agenthub.storage.keys import SessionKey
from agenthub.storage.paths import AgentLayout

log = structlog.get_logger(__name__)

T = TypeVar("T")
SYNC_DELAY_S = 1.0
"""How long an appended session waits before the index reads it: the appends of that time are read at once. A
search, purge, stats call or close first queues what waits, so it never sees less."""


class SearchService:
    """Owns one SQLite connection per agent, each used only from the service's worker thread."""

    def __init__(self, data_dir: Path, *, sync_delay_s: float = SYNC_DELAY_S) -> None:
        self.data_dir = data_dir
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="search-index")
        self._indexes: dict[str, SearchIndex] = {}  # worker thread only
        self._closing = threading.Event()
        self._sync_delay_s = sync_delay_s
        self._appended: dict[SessionKey, None] = {}  # event loop only: sessions appended to, not yet queued
        self._appended_timer: asyncio.TimerHandle | None = None
        self.sessions_read = 0
        """How many times the worker has read a session's files to update the index (a statistic)."""

    # ---- feeding -------------------------------------------------------------------------------

    def history_changed(self, op: str, key: SessionKey) -> None:
        """A SessionHistory observer: queue the index update, never wait for it. An append waits up to
        `SYNC_DELAY_S` with the others; any other change is queued at once, after the appends that wait."""
        if op != "append":
            self._queue_appended()
            self._submit(self._sync_session, key, op)
            return
        self._appended[key] = None
        if self._appended_timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # not on the event loop: nothing to wait on
                self._queue_appended()
                return
            self._appended_timer = loop.call_later(self._sync_delay_s, self._queue_appended)

    def _queue_appended(self) -> None:
        """Hand the sessions appended to so far to the worker, in one job."""
        if self._appended_timer is not None:
            self._appended_timer.cancel()
            self._appended_timer = None
        if self._appended:
            keys = list(self._appended)
            self._appended.clear()
            self._submit(self._sync_appended, keys)

    def warm(self, agents: Iterable[str]) -> None:
        """Open (and catch up) these agents' indexes in the background, so the first search is fast."""
        for agent in agents:
            self._submit(self._index, agent)

    def _submit(self, fn: Callable[..., object], *args: object) -> None:
        if self._closing.is_set():
            return
        try:
            future = self._executor.submit(fn, *args)
        except RuntimeError:  # shut down meanwhile
            return
        future.add_done_callback(_log_failure)

    # ---- asking --------------------------------------------------------------------------------

    async def search(self, agent: str, terms: list[str], scope: SearchScope, limit: int) -> list[Hit]:
        return await self._run(self._search, agent, terms, scope, limit)

    async def purge(self, agent: str, keys: Sequence[SessionKey]) -> int:
        """After a session delete or "forget me" (its index hook): those sessions (and the memory files) indexed
        again from their files, the old text gone from the database file too. Returns how many sessions."""
        await self._run(lambda: self._index(agent).purge(keys))
        return len(keys)

    async def stats(self, agent: str) -> dict[str, int]:
        return await self._run(lambda: self._index(agent).stats())

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        """`fn` on the worker, after every update of a write that landed before this call."""
        if self._closing.is_set():
            raise RuntimeError("the search service is closed")
        self._queue_appended()
        return await asyncio.wrap_future(self._executor.submit(fn, *args))

    async def close(self) -> None:
        """Stop taking work, finish what is queued (a running catch-up stops early), close the connections."""
        self._queue_appended()
        self._closing.set()
        await asyncio.wrap_future(self._executor.submit(self._close_indexes))  # after the updates queued so far
        self._executor.shutdown(wait=False)

    # ---- on the worker thread ------------------------------------------------------------------

    def _index(self, agent: str) -> SearchIndex:
        index = self._indexes.get(agent)
        if index is None:
            index = self._indexes[agent] = SearchIndex(AgentLayout(self.data_dir, agent))
            files = index.catch_up(stop=self._closing.is_set)
            log.info("search_index_ready", agent=agent, files=files, **index.stats())
        return index

    def _close_indexes(self) -> None:
        for index in self._indexes.values():
            index.close()
        self._indexes.clear()

    def _sync_session(self, key: SessionKey, op: str) -> None:
        self.sessions_read += 1
        self._guarded(key.agent, lambda index: index.sync_session(key, op))

    def _sync_appended(self, keys: list[SessionKey]) -> None:
        for key in keys:
            self._sync_session(key, "append")

    def _search(self, agent: str, terms: list[str], scope: SearchScope, limit: int) -> list[Hit]:
        def ask(index: SearchIndex) -> list[Hit]:
            if scope.session is not None:  # cheap (two stats): also see what another process wrote to this chat
                index.sync_session(SessionKey.parse(scope.session), "append")
            return index.search(terms, scope, limit)

        try:
            return ask(self._index(agent))
        except sqlite3.DatabaseError:  # rebuilt from the files, once
            self._discard(agent)
            return ask(self._index(agent))

    def _guarded(self, agent: str, work: Callable[[SearchIndex], None]) -> None:
        """Run `work`; a broken database is dropped and rebuilt from the files on the next use."""
        try:
            work(self._index(agent))
        except sqlite3.DatabaseError:
            self._discard(agent)

    def _discard(self, agent: str) -> None:
        log.exception("search_index_broken", agent=agent)
        index = self._indexes.pop(agent, None)
        if index is not None:
            index.close()
            remove_index_files(index.path)


def _log_failure(future: Future[object]) -> None:
    if future.cancelled():
        return
    error = future.exception()
    if error is not None:
        log.error("search_index_update_failed", error_type=type(error).__name__, error=str(error))
