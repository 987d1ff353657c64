"""`json_text`: a value as JSON text that UTF-8 can encode, a lone surrogate kept as a `\\udxxx` escape."""

from __future__ import annotations

from agenthub.jsonsafe import utf8_dumps


def json_text(value: object) -> str:
    """UTF-8 JSON text; a lone surrogate (not encodable as UTF-8: user input may hold one, JSON escapes it) is kept
    as a `\\ud8xx` escape instead, so the text is written (a file, a PostgreSQL parameter) instead of failing."""
    return utf8_dumps(value, allow_nan=False)
