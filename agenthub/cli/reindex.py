"""`agenthub store reindex [--agent A]`: the memory_search index built again from what the store holds. PostgreSQL:
the shared tables of each agent dropped and refilled from the history tables (a daemon may run meanwhile: its
searches catch up what changed). Files: each agent's `data/<agent>/index/` removed and built again from the JSONL
files, under the data directory's lock (no daemon may run)."""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from agenthub.config import Settings
from agenthub.errors import InvalidIdError, StorageError
from agenthub.hosting.datalock import DataDirLock, DataDirLocked
from agenthub.session_keys import validate_agent_name
from agenthub.storage.stores import open_stores

if TYPE_CHECKING:
    from agenthub.storage.postgres.search import PostgresSearchIndex
    from agenthub.storage.postgres.search_sync import PostgresIndexFeed

EXIT_OK, EXIT_FAILED, EXIT_LOCKED = 0, 1, 3
AGENT_PARTS = ("sessions", "memory")
"""What `data/<agent>/` holds that memory_search indexes: its histories and its memory files."""


def reindex(settings: Settings, agent: str | None) -> int:
    try:
        return asyncio.run(_reindex(settings, agent))
    except StorageError as e:
        print(f"agenthub store reindex: {e} (run it again)", file=sys.stderr)
        return EXIT_FAILED


async def _reindex(settings: Settings, agent: str | None) -> int:
    stores = await open_stores(settings)
    try:
        return await stores.search.open(Reindex(settings, agent))()
    finally:
        await stores.aclose()


class Reindex:
    """The rebuild the index a backend keeps calls for (an exit code)."""

    def __init__(self, settings: Settings, only: str | None) -> None:
        self.settings, self.only = settings, only

    def beside_files(self, data_dir: Path) -> Callable[[], Awaitable[int]]:
        return lambda: _reindex_files(self.settings, data_dir, self.only)

    def shared_index(self, index: PostgresSearchIndex, feed: PostgresIndexFeed) -> Callable[[], Awaitable[int]]:
        async def rebuild() -> int:
            from agenthub.search.shared import SharedSearchService

            search = SharedSearchService(index, feed)
            for agent in [self.only] if self.only else await feed.agents():
                _say(agent, await search.rebuild(agent))
            return EXIT_OK

        return rebuild


async def _reindex_files(settings: Settings, data_dir: Path, only: str | None) -> int:
    lock = DataDirLock(data_dir)
    try:
        lock.acquire("store reindex")
    except DataDirLocked as e:
        print(f"agenthub store reindex: {e}", file=sys.stderr)
        return EXIT_LOCKED
    try:
        agents = [only] if only else _file_agents(data_dir)
        await _rebuild_files(data_dir, agents)
    finally:
        lock.release()
    return EXIT_OK


def _file_agents(data_dir: Path) -> list[str]:
    """The agents with something to index: a directory of histories or memory files (`data/usage/`, the usage
    journal beside them, has neither)."""
    if not data_dir.is_dir():
        return []
    return sorted(p.name for p in data_dir.iterdir() if _is_agent(p.name) and _holds_an_agents_files(p))


def _holds_an_agents_files(path: Path) -> bool:
    return any((path / part).is_dir() for part in AGENT_PARTS)


def _is_agent(name: str) -> bool:
    try:
        validate_agent_name(name)
    except InvalidIdError:
        return False
    return True


async def _rebuild_files(data_dir: Path, agents: list[str]) -> None:
    from agenthub.search.service import SearchService
    from agenthub.storage.paths import AgentLayout
    from agenthub.storage.search_files import index_path

    for agent in agents:
        shutil.rmtree(index_path(AgentLayout(data_dir, agent)).parent, ignore_errors=True)
    service = SearchService(data_dir)
    try:
        for agent in agents:
            _say(agent, await service.stats(agent))  # opening an index with no watermarks reads every file
    finally:
        await service.close()


def _say(agent: str, stats: dict[str, int]) -> None:
    print(f"search index of {agent}: {stats['docs']} passages from {stats['sources']} sources", flush=True)
