"""The memory_search ports: the index (`SearchIndexStore`), the vectors (`VectorStore`), which index a backend keeps."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from agenthub.storage.postgres.search import PostgresSearchIndex
    from agenthub.storage.postgres.search_sync import PostgresIndexFeed
    from agenthub.storage.search_index import Passage, SearchDoc, SearchHit, SearchScope, SourceRef
    from agenthub.storage.search_vectors import Stored, Vector


class SearchIndexStore(Protocol):
    """One deployment's search index (files: SQLite per agent under `data/<agent>/index/`; PostgreSQL: tables
    shared by every instance). Every write is one atomic step together with its source's watermark, so an indexer
    that crashes resumes from the watermark and loses nothing (the history is the queue: re-reading it from the
    watermark is always safe)."""

    async def add(self, agent: str, source: SourceRef, docs: Sequence[SearchDoc], watermark: str) -> None:
        """Append docs to `source` (their seq above any stored in it; a doc whose seq is stored replaces it) and
        set the source's watermark, atomically."""
        ...

    async def replace_source(self, agent: str, source: SourceRef, docs: Sequence[SearchDoc], watermark: str) -> None:
        """Make `docs` the whole content of `source` (compaction rewrote the history, a memory file was
        rewritten, a redaction), with its watermark, atomically."""
        ...

    async def drop_source(self, agent: str, source: SourceRef) -> None:
        """Remove the source, its docs and its watermark."""
        ...

    async def drop_session(self, agent: str, session: str) -> None:
        """Remove the session's history and archive sources (a deleted session)."""
        ...

    async def watermarks(self, agent: str) -> dict[SourceRef, str]:
        """Every stored source of the agent with its watermark (what an indexer catches up from)."""
        ...

    async def purge(self, agent: str) -> None:
        """After drops or replaces that removed text ("forget me", a deleted session): make sure no copy of removed
        text is left anywhere in the store's files or tables (SQLite: VACUUM and a WAL checkpoint)."""
        ...

    async def search(self, agent: str, terms: Sequence[str], scope: SearchScope, limit: int) -> list[SearchHit]:
        """The best `limit` hits for these distinct query terms within `scope`, in the order of the module
        docstring, each with its neighbours; [] for no terms."""
        ...


class VectorStore(Protocol):
    """One deployment's vectors. Every method may raise `StorageError` (PostgreSQL) like any store call."""

    async def stored(self, agent: str, session: str) -> dict[str, Stored]:
        """digest → what is stored, for every vector of the session."""
        ...

    async def put(self, agent: str, model: str, items: Sequence[tuple[Passage, Vector]]) -> None:
        """Store (or overwrite) the vectors of these passages, each under `digest_of(passage)`."""
        ...

    async def relabel(self, agent: str, session: str, kinds: Mapping[str, str]) -> None:
        """digest → the kind (`history`/`archive`) its passage is of now."""
        ...

    async def remove(self, agent: str, session: str, digests: Collection[str]) -> None: ...

    async def drop_session(self, agent: str, session: str) -> None: ...

    async def nearest(
        self, agent: str, model: str, query: Vector, scope: SearchScope, limit: int
    ) -> list[tuple[Passage, float]]:
        """The `limit` passages of `scope` (histories and archives; vectors are not kept of memory files) whose
        vectors (of `model`) are nearest to `query`, best first, with their cosine similarity."""
        ...

    async def purge(self, agent: str) -> None:
        """After removals ("forget me"): no copy of removed text left in the store's files."""
        ...

    async def close(self) -> None: ...


Built = TypeVar("Built", covariant=True)


class SearchKit(Protocol[Built]):
    """What the search package builds over a backend's index (a searcher, a forget hook, a reindex): the backend
    picks the method that fits the index it keeps, so nobody asks for the backend's name."""

    def beside_files(self, data_dir: Path) -> Built:
        """An index per agent kept beside the data files (`data/<agent>/index/`), built from those files."""
        ...

    def shared_index(self, index: PostgresSearchIndex, feed: PostgresIndexFeed) -> Built:
        """One index every instance shares, `feed` reading the store's histories and memory files into it."""
        ...


class SearchPort(Protocol):
    """Which memory_search index a backend keeps: `open(kit)` has the kit build its product over it."""

    def open(self, kit: SearchKit[Built]) -> Built: ...
