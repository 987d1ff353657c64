"""`agenthub store init`: create or migrate the PostgreSQL schema of `[store] dsn` (also done on every start);
`agenthub store migrate --from files --to postgres`: copy a files deployment into it (and index it for
memory_search); `agenthub store reindex`: build the memory_search index again from what the store holds."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, Any

from agenthub.cli.operator_log import show_store_warnings
from agenthub.cli.settings import settings_or_say_why
from agenthub.config import Settings
from agenthub.errors import StorageError
from agenthub.hosting.datalock import DataDirLock, DataDirLocked

if TYPE_CHECKING:
    from agenthub.storage.copy_run import Counts
    from agenthub.storage.postgres import Database

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_LOCKED = 0, 1, 2, 3
NOT_POSTGRES = (
    'agenthub store: [store] backend is "files", which needs no set-up; for PostgreSQL set '
    '[store] backend = "postgres" and AGENTHUB_STORE__DSN'
)


def add_parser(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "store", help="set up and fill the PostgreSQL store ([store] backend); rebuild the memory_search index"
    )
    actions = parser.add_subparsers(dest="action", required=True)
    actions.add_parser("init", help="create or migrate the schema (idempotent; two instances may run it at once)")
    copy = actions.add_parser(
        "migrate", help="copy the files' state (sessions, memory, tokens, unanswered messages) into PostgreSQL"
    )
    copy.add_argument("--from", dest="source", choices=["files"], required=True, help="the backend to copy from")
    copy.add_argument("--to", dest="target", choices=["postgres"], required=True, help="the backend to copy into")
    reindex = actions.add_parser(
        "reindex", help="build the memory_search index again from the stored histories (either backend)"
    )
    reindex.add_argument("--agent", help="only this agent (default: every agent)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_or_say_why(args)
    if settings is None:
        return EXIT_USAGE
    show_store_warnings()
    if args.action == "migrate":
        return _migrate(settings)
    if args.action == "reindex":
        from agenthub.cli.reindex import reindex

        return reindex(settings, args.agent)
    if settings.store.backend != "postgres" or settings.store.dsn is None:
        print(NOT_POSTGRES, file=sys.stderr)
        return EXIT_USAGE
    from agenthub.storage.postgres import SCHEMA_VERSION  # the driver loads only for this command (~0.2 s)
    from agenthub.storage.postgres.database import migrate

    try:
        applied = asyncio.run(migrate(settings.store.dsn.get_secret_value()))
    except StorageError as e:
        print(f"agenthub store: {e}", file=sys.stderr)
        return EXIT_FAILED
    if applied:
        print(f"schema at version {SCHEMA_VERSION} (applied {', '.join(map(str, applied))})")
    else:
        print(f"schema already at version {SCHEMA_VERSION}")
    return EXIT_OK


NO_DSN = "agenthub store migrate: set AGENTHUB_STORE__DSN to the PostgreSQL database to copy into"


def _migrate(settings: Settings) -> int:
    """Copy under the data directory's lock (no daemon may write the files meanwhile); print the counts."""
    if settings.store.dsn is None:
        print(NO_DSN, file=sys.stderr)
        return EXIT_USAGE
    lock = DataDirLock(settings.data_dir)
    try:
        lock.acquire("store migrate")
    except DataDirLocked as e:
        print(f"agenthub store migrate: {e}", file=sys.stderr)
        return EXIT_LOCKED
    try:
        return asyncio.run(_copy(settings, settings.store.dsn.get_secret_value()))
    except StorageError as e:
        print(f"agenthub store migrate: {e} (run it again to resume)", file=sys.stderr)
        return EXIT_FAILED
    finally:
        lock.release()


async def _copy(settings: Settings, dsn: str) -> int:
    from agenthub.storage.copy import copy_files_to_postgres
    from agenthub.storage.copy_run import Target
    from agenthub.storage.postgres import (
        PostgresInbox,
        PostgresJobs,
        PostgresMemoryStore,
        PostgresSessionStore,
        PostgresTokens,
        open_database,
    )
    from agenthub.storage.postgres.copies import CopyLedger

    database = await open_database(dsn)
    try:
        target = Target(
            PostgresSessionStore(database), PostgresMemoryStore(database), PostgresTokens(database),
            PostgresInbox(database), CopyLedger(database), PostgresJobs(database),
            database, settings.http.idempotency_window_s,
        )  # fmt: skip
        counts = await copy_files_to_postgres(settings.data_dir, settings.auth_dir, target, _say)
        await _index(database)
    finally:
        await database.close()
    return _summary(counts)


async def _index(database: Database) -> None:
    """Index what was copied for memory_search (sessions whose head moved since they were indexed: all, the
    first time; none on a re-run that copied nothing)."""
    from agenthub.search.shared import SharedSearchService
    from agenthub.storage.postgres.search import PostgresSearchIndex
    from agenthub.storage.postgres.search_sync import PostgresIndexFeed

    feed = PostgresIndexFeed(database)
    search = SharedSearchService(PostgresSearchIndex(database), feed)
    for agent in await feed.agents():
        behind = await search.catch_up(agent, None)
        await search.pack(agent)  # in blocks before the first search, not read as pending docs by each
        stats = await search.stats(agent)
        _say(f"search index of {agent}: {behind} sessions indexed now, {stats['docs']} passages in all")


def _summary(counts: Counts) -> int:
    """The figures per kind, then what is wrong (exit 1) or that every item copied is verified (exit 0)."""
    for what, tally in counts.tallies.items():
        print(
            f"{what}: {tally.in_files} in the files, {tally.verified} verified in the database "
            f"({tally.copied} copied now, {tally.skipped} left as the database has them)"
        )
    if counts.differ:
        differ = f"agenthub store migrate: {len(counts.differ)} items differ from the files; run it again"
        print(differ, file=sys.stderr)
        return EXIT_FAILED
    conflicts = [s for s in counts.skipped if s.conflict]
    if conflicts:
        print(
            f"agenthub store migrate: {len(conflicts)} items not copied: the database holds others under their names "
            "(listed above as skipped)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    left = f"; {len(counts.skipped)} left as the database has them (listed above)" if counts.skipped else ""
    print(f"verified: every item copied matches the files{left}")
    return EXIT_OK


def _say(line: str) -> None:
    print(line, flush=True)
