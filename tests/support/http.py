"""Helpers for the HTTP API tests: the default agent's route prefix and the error body's shape."""

from __future__ import annotations

AGENT = "/api/agents/default"


def assert_error(body: object, code: str | None = None) -> None:
    assert isinstance(body, dict) and set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    assert body["error"]["message"]
    if code is not None:
        assert body["error"]["code"] == code
