"""The terminal chat speaks one language: connected to a daemon, its replies follow the terminal's locale (the
one of its own texts) where the daemon configures none."""

from __future__ import annotations

import asyncio

import pytest

from agenthub.cli import main
from agenthub.config import Settings
from agenthub.hosting.datalock import DataDirLock
from tests.support.harness import RunningApi


def chat(message: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["chat", "-m", message])
    return code, capsys.readouterr().out


@pytest.mark.parametrize(("lang", "title"), [("en_US.UTF-8", "Commands:"), ("zh_CN.UTF-8", "命令：")])
async def test_connected_to_a_daemon_the_reply_is_in_the_terminal_s_language(
    api: RunningApi,
    settings: Settings,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    lang: str,
    title: str,
) -> None:
    for name, path in (("DATA", settings.data_dir), ("AGENTS", settings.agents_dir), ("AUTH", settings.auth_dir)):
        monkeypatch.setenv(f"AGENTHUB_{name}_DIR", str(path))
    monkeypatch.setenv("AGENTHUB_TOKEN", api.token)
    monkeypatch.setenv("LANG", lang)
    lock = DataDirLock(settings.data_dir)  # as the daemon holds it: `agenthub chat` connects to it
    lock.acquire(f"http=127.0.0.1:{api.server.port}")
    try:
        code, out = await asyncio.to_thread(chat, "/help", capsys)
    finally:
        lock.release()
    assert code == 0 and out.startswith(title), out
