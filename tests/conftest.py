"""Shared fixtures: an isolated environment per test, settings on tmp dirs, and a gateway on the fake LLM."""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import pytest_asyncio
import structlog
from structlog.testing import LogCapture

from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import Services, build_services
from tests.support import processes
from tests.support.roots import make_settings

if TYPE_CHECKING:
    from tests.support.fakes.anthropic import FakeAnthropic

pytest_plugins = [
    "tests.support.backends",
    "tests.support.fakes.anthropic",
    "tests.support.fakes.embeddings",
    "tests.support.harness",
    "tests.support.postgres",
]


@pytest.fixture(autouse=True)
def _no_process_outlives_its_test() -> Iterator[None]:
    """Every process a test started is ended after it, also when it failed; one still running fails the test
    (a daemon left behind holds its port and data dir for the next run). First fixture in, last out."""
    before = processes.children()
    yield
    left = processes.leftovers(before)
    if left:
        described = [processes.describe(pid) for pid in left]
        for pid in left:
            processes.end(pid)
        pytest.fail(f"the test left {len(left)} process(es) running (now killed): {described}", pytrace=False)


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """A command run in-process configures logging for itself (`configure_logging`): the next test starts from the
    configuration it found, not with that command's level and stream."""
    root = logging.getLogger()
    handlers, level, config = root.handlers[:], root.level, structlog.get_config()
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    structlog.configure(**config)


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test sees the developer's AGENTHUB_*/ANTHROPIC_* variables, agenthub.toml or .env, nor their locale:
    the CLI's texts follow the system locale, which is English here (a test that wants zh-CN sets it)."""
    for name in list(os.environ):
        if name.startswith(("AGENTHUB_", "ANTHROPIC_")):
            monkeypatch.delenv(name)
    for name in ("LC_ALL", "LC_MESSAGES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    monkeypatch.chdir(workdir)


@pytest.fixture
def settings_factory(tmp_path: Path, fake_llm: FakeAnthropic) -> Callable[..., Settings]:
    def factory(**overrides: Any) -> Settings:
        return make_settings(tmp_path, fake_llm.base_url, **overrides)

    return factory


@pytest.fixture
def settings(settings_factory: Callable[..., Settings]) -> Settings:
    return settings_factory()


@pytest.fixture(params=["files", "postgres"])
def backend_settings(request: pytest.FixtureRequest, settings_factory: Callable[..., Settings]) -> Settings:
    """Settings whose state (histories, memory files, ...) is in the files, then in PostgreSQL (`[store]`)."""
    if request.param == "files":
        return settings_factory()
    return settings_factory(store={"backend": "postgres", "dsn": request.getfixturevalue("postgres_dsn")})


@pytest_asyncio.fixture
async def services(settings: Settings) -> AsyncIterator[Services]:
    async with build_services(settings) as built:
        yield built


@pytest.fixture
def gateway(services: Services) -> GatewayCore:
    return services.gateway


@pytest.fixture
def log_capture() -> Iterator[LogCapture]:
    """Capture structlog events with the turn's bound context variables merged in."""
    capture = LogCapture()
    old = structlog.get_config()
    structlog.configure(processors=[structlog.contextvars.merge_contextvars, capture])
    try:
        yield capture
    finally:
        structlog.configure(**old)
