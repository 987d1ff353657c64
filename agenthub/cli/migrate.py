"""`agenthub migrate`: finish the legacy workspace migration that the daemon could not do (a read-only install)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agenthub.cli.operator_log import show_store_warnings
from agenthub.cli.settings import settings_or_say_why
from agenthub.hosting.datalock import is_locked
from agenthub.storage.migrate import migrate_workspace_layout

EXIT_OK, EXIT_INCOMPLETE, EXIT_USAGE = 0, 1, 2


def add_parser(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "migrate", help="move the legacy workspace layout to workspace/<agent>/ and rewrite agent.json paths"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_or_say_why(args)
    if settings is None:
        return EXIT_USAGE
    show_store_warnings()  # an entry left in place (its target exists): one warning line each
    report = migrate_workspace_layout(settings.workspace_dir, settings.agents_dir)
    for action in report.done:
        print(action)
    for left in report.pending:
        print(f"agenthub migrate: could not {left}", file=sys.stderr)
    if report.pending:
        return EXIT_INCOMPLETE
    if not report.done:
        print("agenthub migrate: nothing to do")
    elif is_locked(settings.data_dir):
        print("agenthub migrate: done; restart the daemon so its agents use the new paths", file=sys.stderr)
    return EXIT_OK
