"""What the stores warn about, shown to the operator of a one-shot command (`store`, `migrate`): one line each on
stderr, their info quiet."""

from __future__ import annotations

import logging
import sys

from agenthub.log import configure_logging

DATABASE_LOGGERS = ("psycopg",)
DATABASE_FAILURES = frozenset({"store_unavailable", "store_refused", "store_start_failed"})
"""The database's failures (its driver's records, and `Database`'s events for them) end the command with its own one
line (`agenthub store …: cannot connect …`): said once. What the PostgreSQL stores warn about the data (a record
skipped) is said like the files' warnings."""


def show_store_warnings() -> None:
    """What the stores warn about (a corrupt history line skipped while copying) is the operator's to see: one line
    each on stderr; their info stays quiet, the counts on stdout say what was done."""
    configure_logging("warning", "line", stream=sys.stderr)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_not_the_databases)


def _not_the_databases(record: logging.LogRecord) -> bool:
    if any(record.name == name or record.name.startswith(f"{name}.") for name in DATABASE_LOGGERS):
        return False
    event = record.msg.get("event") if isinstance(record.msg, dict) else None  # a structlog record's event dict
    return event not in DATABASE_FAILURES
