"""Logging configured for the standard streams follows them when they are replaced (a closed one is never used)."""

from __future__ import annotations

import io
import json
import logging
import sys

import pytest

from agenthub.log import configure_logging


def test_a_record_goes_to_the_current_stderr_not_the_one_logging_was_configured_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    configure_logging("info", "json", stream=sys.stderr)
    first.close()  # e.g. a command's captured stream, gone once it returned
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    logging.getLogger("agenthub.test").warning("after_the_swap")
    lines = second.getvalue().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["after_the_swap"]  # one JSON line, no logging error


def test_an_explicit_stream_stays_the_stream() -> None:
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    logging.getLogger("agenthub.test").warning("to_the_given_stream")
    assert "to_the_given_stream" in out.getvalue()
