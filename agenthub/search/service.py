"""The search service: ranked recall over every agent's index, kept current by SessionHistory's observers.

On files the index is SQLite per agent on one worker thread (`FileSearchIndexStore`): history changes are handed to
the worker as they land (fire and forget, in order; appends gathered for `SYNC_DELAY_S`, so a busy session is read
once per batch, not once per message), and a search is queued behind them, so it sees every write that finished
before it was asked. The event loop never touches SQLite.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from agenthub.search.docs import DOC_READERS
from agenthub.search.rerank import CANDIDATES, ranked
from agenthub.search.text import query_terms
from agenthub.session_keys import SessionKey, key_from_file_stem
from agenthub.storage.files import FileSessionStore
from agenthub.storage.history_handover import Appended
from agenthub.storage.search_files_feed import FilesSearch
from agenthub.storage.search_index import MEMORY, SearchHit, SearchScope, SourceRef

if TYPE_CHECKING:  # the index (numpy) loads on the worker thread that opens it, the vectors only when configured
    from agenthub.search.vectors import VectorIndex
    from agenthub.storage.history_writer import HistoryWriter
    from agenthub.storage.search_sqlite import SqliteSearchIndex

log = structlog.get_logger(__name__)

SYNC_DELAY_S = 1.0
"""How long an appended session waits before the index reads it: the appends of that time are read at once. A
search, purge, stats call or close first queues what waits, so it never sees less."""


class SearchService:
    """`search(agent, query, scope, limit)`: the best passages for a question or keywords, with their neighbours."""

    def __init__(self, data_dir: Path, *, sync_delay_s: float = SYNC_DELAY_S) -> None:
        self.data_dir = data_dir
        files = FilesSearch(data_dir)  # the files backend's search port: where the files are is its business
        self.feeder = files.feeder(DOC_READERS)
        self.store = files.index_store(self._opened)
        self._sync_delay_s = sync_delay_s
        self._appended: dict[SessionKey, None] = {}  # event loop only: sessions appended to, not yet queued
        self._appended_timer: asyncio.TimerHandle | None = None
        self._handed: dict[SessionKey, list[Appended]] = {}  # event loop only: the writer's hand-overs, not yet queued
        self._followed: list[HistoryWriter] = []
        self.vectors: VectorIndex | None = None
        """`[search.embeddings]`: the vectors fused with the lexical ranking (None: lexical only)."""

    @property
    def sessions_read(self) -> int:
        """How many times a session's files were read to update the index (a statistic)."""
        return self.feeder.sessions_read

    # ---- feeding -------------------------------------------------------------------------------

    def history_changed(self, op: str, key: SessionKey) -> None:
        """A SessionHistory observer: queue the index update, never wait for it. An append waits up to
        `SYNC_DELAY_S` with the others; any other change is queued at once, after the appends that wait."""
        if op != "append":
            self._queue_appended()
            self._submit(key.agent, lambda index: self.feeder.sync_session(index, key, op))
            return
        self._appended[key] = None
        if self._appended_timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # not on the event loop: nothing to wait on
                self._queue_appended()
                return
            self._appended_timer = loop.call_later(self._sync_delay_s, self._queue_appended)

    def follow(self, store: object) -> None:
        """Take the hand-overs of `store`'s history writer (files only): an append is then indexed from the lines
        as written, without reading the file again (`FileFeeder.sync_session`). Undone by `close`."""
        if isinstance(store, FileSessionStore):
            store.writer.followers.append(self.appended)
            self._followed.append(store.writer)

    def appended(self, item: Appended) -> None:
        """A HistoryWriter follower: keep the hand-over for the session's next index update (queued as an append)."""
        key = key_from_file_stem(item.stem)
        if key is None or key.agent != item.agent:
            return
        self._handed.setdefault(key, []).append(item)
        self.history_changed("append", key)

    def _queue_appended(self) -> None:
        """Hand the sessions appended to so far (and the writer's hand-overs of them) to the worker, in one job."""
        if self._appended_timer is not None:
            self._appended_timer.cancel()
            self._appended_timer = None
        if self._appended or self._handed:
            keys = list(dict.fromkeys([*self._appended, *self._handed]))
            handed, self._handed = self._handed, {}
            self._appended.clear()
            self.store.submit(lambda: self._sync_appended(keys, handed))

    def _sync_appended(self, keys: list[SessionKey], handed: dict[SessionKey, list[Appended]]) -> None:
        """Every session appended to in the last `SYNC_DELAY_S`, one transaction per agent."""
        by_agent: dict[str, list[SessionKey]] = {}
        for key in keys:
            by_agent.setdefault(key.agent, []).append(key)
        for agent, appended in by_agent.items():
            self.store.guarded(agent, self._appended_to(appended, handed))

    def _appended_to(
        self, keys: list[SessionKey], handed: dict[SessionKey, list[Appended]]
    ) -> Callable[[SqliteSearchIndex], None]:
        def sync(index: SqliteSearchIndex) -> None:
            with index.transaction():
                for key in keys:
                    self.feeder.sync_session(index, key, "append", handed.get(key, ()))

        return sync

    def _submit(self, agent: str, work: Callable[[SqliteSearchIndex], object]) -> None:
        self.store.submit(lambda: self.store.guarded(agent, work))

    def warm(self, agents: Iterable[str]) -> None:
        """Open (and catch up) these agents' indexes in the background, so the first search is fast."""
        for agent in agents:
            self._submit(agent, lambda index: None)

    def _opened(self, agent: str, index: SqliteSearchIndex) -> None:
        files = self.feeder.catch_up(agent, index, stop=self.store.closing.is_set)
        log.info("search_index_ready", agent=agent, files=files, rebuilt=index.rebuilt, **index.stats())

    # ---- asking --------------------------------------------------------------------------------

    async def search(
        self,
        agent: str,
        query: str,
        scope: SearchScope,
        limit: int,
        *,
        memory_files: Mapping[str, Path] | None = None,
        zone: dt.tzinfo = dt.UTC,
    ) -> list[SearchHit]:
        """The best `limit` passages of `agent` for `query` (a question or keywords, any language) within `scope`,
        best first, each with the turn before and after it. `memory_files`: where the memory names of the scope
        are kept as files (indexed again first if they changed). [] when the query has no searchable term.
        With `vectors`, the lexical ranking (`CANDIDATES` deep) fused with the nearest passages. `zone`: the
        calendar a question's days are read on (`scheduler.timezone`)."""
        if self.vectors is None:
            return await self._lexical(agent, query, scope, limit, memory_files, zone)
        lexical = await self._lexical(agent, query, scope, max(limit, CANDIDATES), memory_files, zone)
        return await self.vectors.search(agent, query, scope, limit, lexical)

    async def _lexical(
        self,
        agent: str,
        query: str,
        scope: SearchScope,
        limit: int,
        memory_files: Mapping[str, Path] | None,
        zone: dt.tzinfo,
    ) -> list[SearchHit]:
        self._queue_appended()
        files = dict(memory_files or {})

        def ask(index: SqliteSearchIndex) -> list[SearchHit]:
            terms = query_terms(query)  # here, not on the event loop: the segmenter's dictionary loads once
            for name, path in files.items():
                self.feeder.sync_memory(index, SourceRef(MEMORY, "", name), path)
            if scope.session is not None:  # cheap (two stats): also see what another process wrote to this chat
                self.feeder.sync_session(index, SessionKey.parse(scope.session), "append")
            if not terms:
                return []
            return ranked(
                lambda asked, n: index.search(asked, scope, n), terms, limit, query, lambda: index.newest(scope), zone
            )

        return await self.store.run(agent, ask)

    async def purge(self, agent: str, keys: Sequence[SessionKey]) -> int:
        """After a session delete or "forget me" (its index hook): those sessions (and the memory files) indexed
        again from their files, the old text gone from the database file too. Returns how many sessions."""
        self._queue_appended()
        await self.store.run(agent, lambda index: self.feeder.purge(index, keys))
        if self.vectors is not None:
            await self.vectors.purge(agent, keys)
        return len(keys)

    async def stats(self, agent: str) -> dict[str, int]:
        self._queue_appended()
        return await self.store.run(agent, lambda index: index.stats())

    async def close(self) -> None:
        """Stop taking work, finish what is queued (a running catch-up stops early), close the connections."""
        for writer in self._followed:
            with contextlib.suppress(ValueError):
                writer.followers.remove(self.appended)
        self._followed.clear()
        self._queue_appended()
        await self.store.close()
        if self.vectors is not None:
            await self.vectors.close()
