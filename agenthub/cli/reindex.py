"""`agenthub store reindex [--agent A]`: the memory_search index built again from what the store holds. PostgreSQL:
the shared tables of each agent dropped and refilled from the history tables (a daemon may run meanwhile: its
searches catch up what changed). Files: each agent's `data/<agent>/index/` removed and built again from the JSONL
files, under the data directory's lock (no daemon may run)."""

from __future__ import annotations

import asyncio
import shutil
import sys

from agenthub.config import Settings
from agenthub.errors import InvalidIdError, StorageError
from agenthub.hosting.datalock import DataDirLock, DataDirLocked
from agenthub.session_keys import validate_agent_name

EXIT_OK, EXIT_FAILED, EXIT_LOCKED = 0, 1, 3


def reindex(settings: Settings, agent: str | None) -> int:
    try:
        if settings.store.backend == "postgres" and settings.store.dsn is not None:
            asyncio.run(_reindex_postgres(settings.store.dsn.get_secret_value(), agent))
            return EXIT_OK
        return _reindex_files(settings, agent)
    except StorageError as e:
        print(f"agenthub store reindex: {e} (run it again)", file=sys.stderr)
        return EXIT_FAILED


async def _reindex_postgres(dsn: str, only: str | None) -> None:
    from agenthub.search.shared import SharedSearchService
    from agenthub.storage.postgres import open_database
    from agenthub.storage.postgres.search import PostgresSearchIndex
    from agenthub.storage.postgres.search_sync import PostgresIndexFeed

    database = await open_database(dsn)
    try:
        feed = PostgresIndexFeed(database)
        search = SharedSearchService(PostgresSearchIndex(database), feed)
        for agent in [only] if only else await feed.agents():
            stats = await search.rebuild(agent)
            _say(agent, stats)
    finally:
        await database.close()


def _reindex_files(settings: Settings, only: str | None) -> int:
    lock = DataDirLock(settings.data_dir)
    try:
        lock.acquire("store reindex")
    except DataDirLocked as e:
        print(f"agenthub store reindex: {e}", file=sys.stderr)
        return EXIT_LOCKED
    try:
        agents = [only] if only else _file_agents(settings)
        asyncio.run(_rebuild_files(settings, agents))
    finally:
        lock.release()
    return EXIT_OK


def _file_agents(settings: Settings) -> list[str]:
    if not settings.data_dir.is_dir():
        return []
    return sorted(p.name for p in settings.data_dir.iterdir() if p.is_dir() and _is_agent(p.name))


def _is_agent(name: str) -> bool:
    try:
        validate_agent_name(name)
    except InvalidIdError:
        return False
    return True


async def _rebuild_files(settings: Settings, agents: list[str]) -> None:
    from agenthub.search.service import SearchService
    from agenthub.storage.paths import AgentLayout
    from agenthub.storage.search_files import index_path

    for agent in agents:
        shutil.rmtree(index_path(AgentLayout(settings.data_dir, agent)).parent, ignore_errors=True)
    service = SearchService(settings.data_dir)
    try:
        for agent in agents:
            _say(agent, await service.stats(agent))  # opening an index with no watermarks reads every file
    finally:
        await service.close()


def _say(agent: str, stats: dict[str, int]) -> None:
    print(f"search index of {agent}: {stats['docs']} passages from {stats['sources']} sources", flush=True)
