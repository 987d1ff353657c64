"""The searcher each backend's index calls for (`Stores.search.open(SEARCHERS)`): `SearchService` beside the
files, `SharedSearchService` over an index every instance shares."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agenthub.search.api import Searcher

if TYPE_CHECKING:
    from agenthub.storage.postgres.search import PostgresSearchIndex
    from agenthub.storage.postgres.search_sync import PostgresIndexFeed


class SearcherKit:
    """Builds the daemon's `Searcher` over the index a backend keeps."""

    def beside_files(self, data_dir: Path) -> Searcher:
        from agenthub.search.service import SearchService

        return SearchService(data_dir)

    def shared_index(self, index: PostgresSearchIndex, feed: PostgresIndexFeed) -> Searcher:
        from agenthub.search.shared import SharedSearchService

        return SharedSearchService(index, feed)


SEARCHERS = SearcherKit()
