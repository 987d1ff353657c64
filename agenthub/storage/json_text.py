"""`json_text`: a value as JSON text that UTF-8 can encode, a lone surrogate kept as a `\\udxxx` escape."""

from __future__ import annotations

import json


def json_text(value: object) -> str:
    """UTF-8 JSON text; a lone surrogate (not encodable as UTF-8: user input may hold one, JSON escapes it) is kept
    as a `\\ud8xx` escape instead, so the text is written (a file, a PostgreSQL parameter) instead of failing."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, allow_nan=False)
    return text
