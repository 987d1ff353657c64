"""`json_text`: JSON text UTF-8 can encode; non-ASCII left as it is, a lone surrogate kept as an escape."""

from __future__ import annotations

import json

import pytest

from agenthub.storage.json_text import json_text


def test_non_ascii_text_stays_as_it_is_and_a_lone_surrogate_becomes_an_escape_that_reads_back() -> None:
    assert json_text({"t": "中文 😀 \u2028"}) == '{"t": "中文 😀 \u2028"}'
    value = {"t": "中文 \ud800 \x00"}
    text = json_text(value)
    text.encode("utf-8")  # no UnicodeEncodeError: writable to a file or a PostgreSQL parameter
    assert "\\ud800" in text and json.loads(text) == value


def test_a_value_that_is_no_json_is_refused() -> None:
    with pytest.raises(ValueError):
        json_text({"x": float("nan")})
