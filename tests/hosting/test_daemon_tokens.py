"""The in-process daemon and API tokens: the console hint's first token, and a revoke taking effect at once."""

from __future__ import annotations

import asyncio
import contextlib
import io
import socket
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pydantic import SecretStr
from structlog.testing import capture_logs

from agenthub.cli import main
from agenthub.config import Settings, StoreSettings
from agenthub.hosting.daemon import Daemon
from agenthub.hosting.systemd import Notifier
from agenthub.storage.postgres import PostgresTokens, open_database
from agenthub.storage.tokens import TokenStore
from tests.support.fakes.anthropic import FakeAnthropic


@contextlib.asynccontextmanager
async def running_daemon(settings: Settings, tmp_path: Path, console: io.StringIO | None = None) -> AsyncIterator[str]:
    """Run the daemon until the block ends; yields its base URL once it sent READY=1 on a notify socket."""
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(str(path))
        notify.setblocking(False)
        daemon = Daemon(settings, notifier=Notifier({"NOTIFY_SOCKET": str(path)}), console=console)
        run = asyncio.create_task(daemon.run())
        ready = asyncio.create_task(asyncio.get_running_loop().sock_recv(notify, 4096))
        try:
            done, _ = await asyncio.wait({run, ready}, timeout=20, return_when=asyncio.FIRST_COMPLETED)
            assert ready in done and ready.result() == b"READY=1", run.result() if run in done else "not ready"
            assert daemon.server is not None
            yield f"http://127.0.0.1:{daemon.server.port}"
        finally:
            ready.cancel()
            daemon.request_stop()
            assert await asyncio.wait_for(run, 20) == 0


async def status_with(base: str, token: str) -> int:
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as client, client.get(base + "/api/agents", headers=headers) as resp:
        return resp.status


def events(logs: Sequence[Mapping[str, Any]]) -> list[str]:
    return [str(entry["event"]) for entry in logs]


@pytest.fixture
def daemon_settings(settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic) -> Settings:
    return settings_factory(http={"port": 0})


async def test_a_revoked_token_is_refused_by_the_running_daemon_at_once(
    daemon_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENTHUB_AUTH_DIR", str(daemon_settings.auth_dir))
    ci = TokenStore(daemon_settings.auth_dir).create("ci")
    keep = TokenStore(daemon_settings.auth_dir).create("keep")
    async with running_daemon(daemon_settings, tmp_path) as base:
        assert await status_with(base, ci) == 200  # the daemon has read the file with `ci` in it
        capsys.readouterr()
        assert await asyncio.to_thread(main, ["token", "revoke", "ci"]) == 0  # the command runs its own loop
        assert capsys.readouterr().out == "revoked ci\n"
        assert await status_with(base, ci) == 401
        assert await status_with(base, keep) == 200


async def test_the_console_hint_creates_the_first_token_before_the_http_channel_checks(
    daemon_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    console = io.StringIO()
    with capture_logs() as logs:
        async with running_daemon(daemon_settings, tmp_path, console) as base:
            hint = console.getvalue()
            prefix = "Created an API token (shown only once): "
            (line,) = [line for line in hint.splitlines() if line.startswith(prefix)]
            assert await status_with(base, line[len(prefix) :]) == 200
    assert "http_no_tokens" not in events(logs)
    assert "console_token_created" in events(logs)
    assert [t.name for t in TokenStore(daemon_settings.auth_dir).stored()] == ["console"]


async def test_without_the_hint_and_without_tokens_the_warning_stays(daemon_settings: Settings, tmp_path: Path) -> None:
    with capture_logs() as logs:
        async with running_daemon(daemon_settings, tmp_path):
            pass
    (warning,) = [entry for entry in logs if entry["event"] == "http_no_tokens"]
    assert warning["log_level"] == "warning"
    assert not (daemon_settings.auth_dir / "tokens.json").exists()


async def test_the_hint_names_the_command_the_daemon_was_started_with(
    daemon_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = Path.cwd() / ".venv" / "bin" / "agenthub"  # as `make run` starts it: not on PATH
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n", encoding="utf-8")
    monkeypatch.setattr(sys, "argv", [str(script), "serve", "--console-hint"])
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    TokenStore(daemon_settings.auth_dir).create("existing")
    console = io.StringIO()
    with capture_logs() as logs:
        async with running_daemon(daemon_settings, tmp_path, console):
            pass
    assert "Sign in with an API token; make a new one with: .venv/bin/agenthub token create --name NAME" in (
        console.getvalue()
    )
    assert "Created an API token" not in console.getvalue()
    assert "http_no_tokens" not in events(logs)


async def test_on_postgres_the_console_hint_s_token_is_stored_in_the_database(
    daemon_settings: Settings, tmp_path: Path, postgres_dsn: str
) -> None:
    settings = daemon_settings.model_copy(
        update={"store": StoreSettings(backend="postgres", dsn=SecretStr(postgres_dsn))}
    )
    console = io.StringIO()
    async with running_daemon(settings, tmp_path, console) as base:
        prefix = "Created an API token (shown only once): "
        (line,) = [line for line in console.getvalue().splitlines() if line.startswith(prefix)]
        assert await status_with(base, line[len(prefix) :]) == 200
    assert not (settings.auth_dir / "tokens.json").exists()
    database = await open_database(postgres_dsn)
    try:
        assert [t.name for t in await PostgresTokens(database).stored()] == ["console"]
    finally:
        await database.close()
