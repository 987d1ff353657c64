"""`agenthub store init`: create or migrate the PostgreSQL schema of `[store] dsn` (also done on every start)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from agenthub.config import load_settings
from agenthub.errors import ConfigError, StorageError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
NOT_POSTGRES = (
    'agenthub store: [store] backend is "files", which needs no set-up; for PostgreSQL set '
    '[store] backend = "postgres" and AGENTHUB_STORE__DSN'
)


def add_parser(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("store", help="manage the PostgreSQL store ([store] backend)")
    actions = parser.add_subparsers(dest="action", required=True)
    actions.add_parser("init", help="create or migrate the schema (idempotent; two instances may run it at once)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
    except ConfigError as e:
        print(f"agenthub: {e}", file=sys.stderr)
        return EXIT_USAGE
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
