"""Settings whose every directory lies under one root: for tests and benchmarks that run in a scratch folder."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from agenthub.config import Settings, load_settings

if TYPE_CHECKING:
    import pytest


def make_settings(root: Path, llm_base_url: str | None = None, **overrides: Any) -> Settings:
    """Settings with every directory under `root`; the LLM points at `llm_base_url` when given. The HTTP port is 0
    (any free one) unless `http` says otherwise: a test never binds the default port a running daemon holds."""
    llm: dict[str, Any] = dict(overrides.pop("llm", {}))
    http = overrides.pop("http", {})
    if isinstance(http, dict):
        http = {"port": 0, **http}
    if llm_base_url is not None:
        llm.setdefault("base_url", llm_base_url)
        llm.setdefault("api_key", "test-key")
        llm.setdefault("retry_base_s", 0.01)
        llm.setdefault("retry_max_s", 0.05)
        llm.setdefault("timeout_s", 5.0)
    return load_settings(
        None,
        data_dir=root / "data",
        agents_dir=root / "agents",
        auth_dir=root / "auth",
        workspace_dir=root / "workspace",
        llm=llm,
        http=http,
        **overrides,
    )


def dirs_in_env(root: Path, monkeypatch: pytest.MonkeyPatch, dsn: str | None = None) -> None:
    """The environment of an `agenthub` command run in-process with every directory under `root` (and the store's
    DSN when given), as an operator's unit would set it."""
    for name in ("data", "agents", "auth", "workspace"):
        monkeypatch.setenv(f"AGENTHUB_{name.upper()}_DIR", str(root / name))
    if dsn is not None:
        monkeypatch.setenv("AGENTHUB_STORE__DSN", dsn)
