"""What the rest of the product asks of memory search, whichever backend keeps the index (`SearchService` on the
files, `SharedSearchService` on PostgreSQL)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from agenthub.session_keys import SessionKey
from agenthub.storage.search_index import SearchHit, SearchScope

if TYPE_CHECKING:
    from agenthub.search.vectors import VectorIndex

UNAVAILABLE = "memory search is unavailable right now (the store cannot be reached); go on without it"
"""The tool's error when the index cannot be reached: the turn goes on."""


class Searcher(Protocol):
    vectors: VectorIndex | None
    """`[search.embeddings]`: the vectors fused with the lexical ranking (None: lexical only)."""

    def history_changed(self, op: str, key: SessionKey) -> None:
        """A SessionHistory observer: the session changed (`append`, `replace`, `clear`, `delete`, `reload`)."""
        ...

    def warm(self, agents: Iterable[str]) -> None:
        """Catch these agents' indexes up in the background, so the first search is fast."""
        ...

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
        """The best `limit` passages for a question or keywords within `scope`, with their neighbours; a question's
        days ("yesterday", 上周二) are those of `zone` (`scheduler.timezone`)."""
        ...

    async def purge(self, agent: str, keys: Sequence[SessionKey]) -> int:
        """After a session delete or "forget me": those sessions (and the memory files) indexed again from what
        the store now holds, no copy of the removed text left. Returns how many sessions."""
        ...

    async def stats(self, agent: str) -> dict[str, int]: ...

    async def close(self) -> None: ...
