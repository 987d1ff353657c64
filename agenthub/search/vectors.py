"""`[search.embeddings]` at work: each session's messages embedded as they are stored (fed by SessionHistory's
observer, gathered for a moment like the lexical index), queries embedded, and the nearest passages fused with the
lexical ranking by reciprocal rank fusion. The endpoint failing or slow: lexical results only, one log line."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import structlog

from agenthub.search.docs import RecordReader
from agenthub.search.embeddings import EmbeddingsClient, EmbeddingsUnavailable
from agenthub.search.rerank import CANDIDATES
from agenthub.session_keys import SessionKey
from agenthub.storage.ports import SessionStore, VectorStore
from agenthub.storage.search_index import (
    ARCHIVE,
    HISTORY,
    DocKind,
    Passage,
    SearchHit,
    SearchScope,
    SourceRef,
    identity,
)
from agenthub.storage.search_vectors import digest_of

log = structlog.get_logger(__name__)

RRF_K = 60
SYNC_DELAY_S = 1.0


def _current_passages(
    key: SessionKey, archive: Sequence[dict[str, Any]], history: Sequence[dict[str, Any]]
) -> dict[str, Passage]:
    """The session's passages by digest; the history's copy wins over the archive's (it is in the working context)."""
    current: dict[str, Passage] = {}
    for passage in passages_of(key, archive, ARCHIVE):
        current[digest_of(passage)] = passage
    for passage in passages_of(key, history, HISTORY):
        current[digest_of(passage)] = passage
    return current


def passages_of(key: SessionKey, records: Sequence[dict[str, Any]], kind: DocKind) -> list[Passage]:
    """The searchable passages of a history's or an archive's records, exactly as the lexical index has them."""
    reader, source = RecordReader(), SourceRef(kind, str(key))
    return [doc.passage for seq, record in enumerate(records) if (doc := reader.doc(source, seq, record)) is not None]


def fuse(lexical: Sequence[SearchHit], nearest: Sequence[tuple[Passage, float]], limit: int) -> list[SearchHit]:
    """Reciprocal rank fusion (k = 60) of the two rankings, by passage identity; a tie keeps the lexical order,
    then the vector order. A passage only the vectors found comes without neighbours."""
    scores: dict[tuple[object, ...], float] = {}
    hits: dict[tuple[object, ...], SearchHit] = {}
    for rank, hit in enumerate(lexical, start=1):
        key = identity(hit.passage)
        scores[key] = scores.get(key, 0.0) + 1 / (RRF_K + rank)
        hits.setdefault(key, hit)
    for rank, (passage, _cosine) in enumerate(nearest, start=1):
        key = identity(passage)
        scores[key] = scores.get(key, 0.0) + 1 / (RRF_K + rank)
        hits.setdefault(key, SearchHit(passage, 0.0))
    order = sorted(hits, key=lambda k: -round(scores[k], 12))  # stable: first seen first among equals
    return [SearchHit(hits[k].passage, scores[k], hits[k].before, hits[k].after) for k in order[:limit]]


class VectorIndex:
    """Keeps the vectors of every session level with its history and archive, and answers nearest passages."""

    def __init__(
        self, client: EmbeddingsClient, store: VectorStore, sessions: SessionStore, *, delay_s: float = SYNC_DELAY_S
    ) -> None:
        self.client = client
        self.store = store
        self.sessions = sessions
        self.delay_s = delay_s
        self._dirty: dict[SessionKey, None] = {}
        self._worker: asyncio.Task[None] | None = None
        self._closing = False

    # ---- feeding -------------------------------------------------------------------------------

    def history_changed(self, op: str, key: SessionKey) -> None:
        """A SessionHistory observer: the session is read again (after `delay_s`, with the others changed meanwhile)."""
        if self._closing:
            return
        self._dirty[key] = None
        if self._worker is None or self._worker.done():
            try:
                self._worker = asyncio.get_running_loop().create_task(self._drain())
            except RuntimeError:  # not on the event loop: the next change or search catches up
                return

    async def _drain(self) -> None:
        while self._dirty:
            await asyncio.sleep(self.delay_s)
            keys = list(self._dirty)
            self._dirty.clear()
            for key in keys:
                try:
                    await self.sync_session(key)
                except Exception as e:  # the store away: the session's next change tries again
                    log.warning("search_vectors_sync_failed", error_type=type(e).__name__)

    async def settle(self) -> None:
        """Wait until every change noted so far is in the vectors (tests, purge, close)."""
        while self._worker is not None and not self._worker.done():
            self.delay_s, delay = 0.0, self.delay_s
            try:
                await asyncio.shield(self._worker)
            finally:
                self.delay_s = delay

    async def sync_session(self, key: SessionKey) -> int:
        """Make the session's vectors those of its history and archive now: new passages embedded, gone ones removed,
        archived ones relabelled. Returns how many were embedded (0 while the endpoint is away)."""
        agent, session = key.agent, str(key)
        archive, history = await self.sessions.read_archive(key), await self.sessions.load(key)
        current = await asyncio.to_thread(_current_passages, key, archive, history)  # CPU-heavy: off the loop
        stored = await self.store.stored(agent, session)
        if not current:
            if stored:
                await self.store.drop_session(agent, session)
            return 0
        await self.store.remove(agent, session, [d for d in stored if d not in current])
        relabel = {d: p.kind for d, p in current.items() if d in stored and stored[d].kind != p.kind}
        await self.store.relabel(agent, session, relabel)
        missing = [p for d, p in current.items() if d not in stored or stored[d].model != self.client.model]
        if not missing or not self.client.available:
            return 0
        try:
            vectors = await self.client.embed([p.text for p in missing])
        except EmbeddingsUnavailable:
            return 0
        await self.store.put(agent, self.client.model, list(zip(missing, vectors, strict=True)))
        return len(missing)

    async def catch_up(self, agents: Sequence[str]) -> int:
        """Every stored session of these agents synced (start-up: what was written while embeddings were off or the
        endpoint away). Returns how many passages were embedded."""
        embedded = 0
        for agent in agents:
            for key in await self.sessions.list_keys(agent):
                if self._closing or not self.client.available:
                    return embedded
                embedded += await self.sync_session(key)
        return embedded

    async def purge(self, agent: str, keys: Sequence[SessionKey]) -> None:
        """After "forget me" redacted these sessions: their vectors follow the redacted text, and the old text leaves
        the store's files."""
        await self.settle()
        for key in keys:
            await self.sync_session(key)
        await self.store.purge(agent)

    # ---- asking --------------------------------------------------------------------------------

    async def nearest(self, agent: str, query: str, scope: SearchScope, limit: int) -> list[tuple[Passage, float]]:
        """The passages nearest to `query` in `scope`; [] when the endpoint is away or slow (logged once)."""
        if not query.strip() or not self.client.available:
            return []
        try:
            (vector,) = await self.client.embed([query], query=True)
        except EmbeddingsUnavailable:
            return []
        return await self.store.nearest(agent, self.client.model, vector, scope, limit)

    async def search(
        self, agent: str, query: str, scope: SearchScope, limit: int, lexical: Sequence[SearchHit]
    ) -> list[SearchHit]:
        """`lexical` (the lexical ranking, `CANDIDATES` deep) fused with the nearest passages, best `limit` first."""
        try:
            nearest = await self.nearest(agent, query, scope, max(limit, CANDIDATES))
        except Exception as e:  # the vectors' store away: the lexical ranking alone
            log.warning("search_vectors_unavailable", error_type=type(e).__name__)
            nearest = []
        return fuse(lexical, nearest, limit)

    async def close(self) -> None:
        self._closing = True
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
        await self.client.close()
        await self.store.close()
