"""memory_search on PostgreSQL: one index in the database, shared by every instance.

The history tables are the queue: a write's own instance catches its session up after it landed, off the turn (one
follower task per instance catches up every session written in the last `SYNC_DELAY_S` in one batch), and a search
first catches up every session of its scope whose head moved since it was indexed, whoever wrote it, so what any
instance stored is found by a search on any instance at once, also after a crash between a write and its indexing.
Records and memory files are tokenised here, on a thread; the store only keeps and ranks the docs.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any

import structlog

from agenthub.errors import InvalidIdError, StorageError
from agenthub.search.docs import RecordReader, memory_docs
from agenthub.search.rerank import CANDIDATES, ranked_async
from agenthub.search.text import query_terms
from agenthub.search.vectors import VectorIndex
from agenthub.session_keys import SessionKey
from agenthub.storage.memory_files import MemoryName
from agenthub.storage.postgres.search import PostgresSearchIndex
from agenthub.storage.postgres.search_pack import PACK_MOST, pack_pending
from agenthub.storage.postgres.search_sync import PostgresIndexFeed
from agenthub.storage.search_index import (
    MEMORY,
    SearchDoc,
    SearchHit,
    SearchScope,
    SourceRef,
    memory_doc_name,
)

log = structlog.get_logger(__name__)

SYNC_DELAY_S = 0.5
"""How long a written session waits before its instance indexes it: the writes of a turn, and of every other session
meanwhile, are read at once. A search never waits for it: it catches its scope up itself."""


def record_docs(
    source: SourceRef, records: Sequence[tuple[int, dict[str, Any]]], start: int, skipped: Sequence[str]
) -> tuple[list[SearchDoc], list[str]]:
    """The docs of `records` from seq `start` on (the earlier ones only teach the reader their tool names)."""
    reader = RecordReader(skipped)
    docs = []
    for seq, record in records:
        doc = reader.doc(source, seq, record)
        if doc is not None and seq >= start:
            docs.append(doc)
    return docs, reader.skipped


def memory_name_of(agent: str, doc_name: str) -> MemoryName | None:
    """The memory file of `agent` a scope's memory doc name (`memory_doc_name`) stands for; None if it is none."""
    path = PurePosixPath(doc_name)
    parts = path.parts
    try:
        if parts == ("auth", "USER.md"):
            name = MemoryName.shared_profile()
        elif parts[:2] == ("auth", "users") and len(parts) == 5 and parts[2] == "group":
            name = MemoryName("group_profile", agent=agent, chat=parts[3], person=path.stem)
        elif parts[:2] == ("auth", "users") and len(parts) == 3:
            name = MemoryName("private_profile", agent=agent, person=path.stem)
        elif parts == ("data", agent, "memory", "MEMORY.md"):
            name = MemoryName.agent_memory(agent)
        elif parts[:4] == ("data", agent, "memory", "chats") and len(parts) == 5:
            name = MemoryName("chat_memory", agent=agent, chat=path.stem)
        else:
            return None
    except InvalidIdError:
        return None
    return name if memory_doc_name(name) == doc_name else None


class SharedSearchService:
    """The `Searcher` over the shared index (`Stores.search.index`, fed through `Stores.search.feed`)."""

    def __init__(
        self, index: PostgresSearchIndex, feed: PostgresIndexFeed, *, sync_delay_s: float = SYNC_DELAY_S
    ) -> None:
        self.index = index
        self.feed = feed
        self._sync_delay_s = sync_delay_s
        self.sessions_read = 0
        """How many times a session was read to update the index (a statistic)."""
        self._pending: dict[SessionKey, None] = {}  # noted by `history_changed`, not caught up yet
        self._follower: asyncio.Task[None] | None = None
        self._packers: dict[str, asyncio.Task[None]] = {}
        self._warming: set[asyncio.Task[None]] = set()
        self._closed = False
        self.vectors: VectorIndex | None = None
        """`[search.embeddings]`: the vectors fused with the lexical ranking (None: lexical only)."""

    # ---- feeding -------------------------------------------------------------------------------

    def history_changed(self, op: str, key: SessionKey) -> None:
        """Note the session for the instance's follower, never wait for it: every `sync_delay_s` the follower
        catches up every session noted meanwhile in one batch (`PostgresIndexFeed.sync_sessions`), after the
        turn's reply. Nothing noted survives a crash, and need not: the history tables are the queue (a search
        catches its scope up first, a start catches every session up)."""
        if self._closed or op == "reload":
            return
        self._pending[key] = None
        if self._follower is None or self._follower.done():
            try:
                self._follower = asyncio.get_running_loop().create_task(self._follow())
            except RuntimeError:  # not on the event loop: the next search catches it up
                return

    async def _follow(self) -> None:
        while self._pending and not self._closed:
            await asyncio.sleep(self._sync_delay_s)
            keys = list(self._pending)
            self._pending.clear()
            try:
                await self.sync_sessions(keys)
            except StorageError:  # the next search (or start) catches them up
                log.warning("search_index_behind", sessions=len(keys))

    async def sync_sessions(self, keys: Sequence[SessionKey]) -> int:
        """Catch these sessions up in one batch per agent; the number of docs added. An agent whose pending docs
        reached the feed's `pack_at` is packed in the background (`search_pack`)."""
        self.sessions_read += len(keys)
        added = await self.feed.sync_sessions(keys, record_docs)
        self._pack_due()
        return added

    def _pack_due(self) -> None:
        """Start packing each agent the feed found due, one packer per agent on this instance."""
        due, self.feed.due = self.feed.due, set()
        for agent in due:
            if self._closed or agent in self._packers:
                continue
            task = asyncio.get_running_loop().create_task(self._pack_quietly(agent))
            self._packers[agent] = task
            task.add_done_callback(partial(self._packed, agent))

    def _packed(self, agent: str, task: asyncio.Task[None]) -> None:
        if self._packers.get(agent) is task:
            del self._packers[agent]

    async def _pack_quietly(self, agent: str) -> None:
        try:
            await self.pack(agent)
        except StorageError:  # packed by the next write that finds it due
            log.warning("search_index_not_packed", agent=agent)

    async def pack(self, agent: str) -> int:
        """Pack every pending doc of the agent (a transaction per `PACK_MOST`); how many."""
        packed = 0
        while (done := await pack_pending(self.index.database, agent)) > 0:
            packed += done
            if done < PACK_MOST:
                break
        return packed

    async def sync_session(self, key: SessionKey, *, full: bool = False) -> int:
        self.sessions_read += 1
        return await self.feed.sync_session(key, record_docs, full=full)

    def warm(self, agents: Iterable[str]) -> None:
        for agent in agents:
            task = asyncio.get_running_loop().create_task(self._warm(agent))
            self._warming.add(task)
            task.add_done_callback(self._warming.discard)

    async def _warm(self, agent: str) -> None:
        """Catch every session of the agent up, then read its most frequent terms' postings into memory."""
        try:
            await self.catch_up(agent, None)
            await self.index.preload(agent)
        except StorageError:
            log.warning("search_index_behind", agent=agent)

    async def catch_up(self, agent: str, scope: SearchScope | None) -> int:
        """Bring the sessions `scope` may see (None: all of the agent's) up to date; how many were behind."""
        if scope is not None and scope.session is not None:
            behind = await self.feed.lagging(agent, [scope.session])
        else:
            behind = await self.feed.lagging(agent)
            if scope is not None:
                allowed: dict[str, bool] = {}
                behind = [k for k in behind if allowed.setdefault(k.channel, bool(scope.agent_scoped(k.channel)))]
        if behind:
            await self.sync_sessions(behind)
        return len(behind)

    async def sync_memory(self, agent: str, doc_names: Iterable[str]) -> None:
        for doc_name in doc_names:
            name = memory_name_of(agent, doc_name)
            if name is None:
                continue
            text, ts = await self.feed.read_memory(name)
            await self.feed.sync_memory(agent, SourceRef(MEMORY, "", doc_name), text, ts, memory_docs)

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
        """As `SearchService.search`, over the shared index (the scope's sessions caught up first)."""
        if self.vectors is None:
            return await self._lexical(agent, query, scope, limit, zone)
        lexical = await self._lexical(agent, query, scope, max(limit, CANDIDATES), zone)
        return await self.vectors.search(agent, query, scope, limit, lexical)

    async def _lexical(
        self, agent: str, query: str, scope: SearchScope, limit: int, zone: dt.tzinfo
    ) -> list[SearchHit]:
        terms = await asyncio.to_thread(query_terms, query)  # the segmenter's dictionary loads once, off the loop
        if not terms:
            return []
        await self.catch_up(agent, scope)
        await self.sync_memory(agent, scope.memory_names)
        return await ranked_async(
            lambda asked, n: self.index.search(agent, asked, scope, n),
            terms,
            limit,
            query,
            lambda: self.index.newest(agent, scope),
            zone,
        )

    async def purge(self, agent: str, keys: Sequence[SessionKey]) -> int:
        """Those sessions indexed again from the tables as they are now, and every memory file indexed of the
        agent again from its text now (a scrubbed line, a deleted file: gone from the tables)."""
        for key in keys:
            await self.sync_session(key, full=True)
        for source in await self.feed.memory_sources(agent):
            await self.sync_memory(agent, [source.name])
            if memory_name_of(agent, source.name) is None:
                await self.index.drop_source(agent, source)
        if self.vectors is not None:
            await self.vectors.purge(agent, keys)
        return len(keys)

    async def rebuild(self, agent: str) -> dict[str, int]:
        """The agent's index dropped and built again from the tables (memory files: on their next search)."""
        await self.index.drop_agent(agent)
        for key in await self.feed.session_keys(agent):
            await self.sync_session(key, full=True)
        await self.pack(agent)
        return await self.index.stats(agent)

    async def stats(self, agent: str) -> dict[str, int]:
        return await self.index.stats(agent)

    async def close(self) -> None:
        """Stop following changes (what was not indexed yet, the next search catches up)."""
        self._closed = True
        tasks = [*self._warming, *self._packers.values(), *([self._follower] if self._follower is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.vectors is not None:
            await self.vectors.close()
