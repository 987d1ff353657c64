"""Shared fixtures: an isolated environment per test, settings on tmp dirs, and a gateway on the fake LLM."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import pytest_asyncio

from agenthub.app import build_gateway
from agenthub.config import Settings, load_settings
from agenthub.gateway.core import GatewayCore

if TYPE_CHECKING:
    from tests.fakes.anthropic import FakeAnthropic

pytest_plugins = ["tests.fakes.anthropic", "tests.harness"]


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the developer's AGENTHUB_*/ANTHROPIC_* variables, agenthub.toml or .env."""
    for name in list(os.environ):
        if name.startswith(("AGENTHUB_", "ANTHROPIC_")):
            monkeypatch.delenv(name)
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)


def make_settings(root: Path, llm_base_url: str | None = None, **overrides: Any) -> Settings:
    """Settings with every directory under `root`; the LLM points at `llm_base_url` when given."""
    llm: dict[str, Any] = dict(overrides.pop("llm", {}))
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
        **overrides,
    )


@pytest.fixture
def settings_factory(tmp_path: Path, fake_llm: FakeAnthropic) -> Callable[..., Settings]:
    def factory(**overrides: Any) -> Settings:
        return make_settings(tmp_path, fake_llm.base_url, **overrides)

    return factory


@pytest.fixture
def settings(settings_factory: Callable[..., Settings]) -> Settings:
    return settings_factory()


@pytest_asyncio.fixture
async def gateway(settings: Settings) -> AsyncIterator[GatewayCore]:
    async with build_gateway(settings) as gw:
        yield gw


def write_agent(agents_dir: Path, name: str, config: dict[str, Any] | None = None, persona: str = "") -> Path:
    """Create `agents/<name>/` with an agent.json and AGENTS.md."""
    import json

    directory = agents_dir / name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "agent.json").write_text(json.dumps(config or {}), encoding="utf-8")
    (directory / "AGENTS.md").write_text(persona or f"You are the {name} agent.", encoding="utf-8")
    return directory
