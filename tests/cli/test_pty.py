"""The CLI in a real pseudo-terminal: Ctrl-C (the terminal's byte, not a signal) stops a slow reply in `agenthub chat`,
and `agenthub serve` run by hand logs readable lines."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import cli_env
from tests.support.fakes.anthropic import FakeAnthropic, hang, reply_text
from tests.support.terminal import Terminal


@pytest.fixture
def terminal_env(tmp_path: Path, fake_llm: FakeAnthropic) -> Iterator[dict[str, str]]:
    env = cli_env(tmp_path, fake_llm)
    env["TERM"] = "xterm"
    yield env


async def test_ctrl_c_in_a_real_terminal_stops_the_reply_and_the_repl_goes_on(
    terminal_env: dict[str, str], fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(reply_text("first reply"), hang(), reply_text("after the stop"))
    term = Terminal(terminal_env, Path.cwd())
    try:
        await term.wait_for("›")
        term.type("hello\r")
        await term.wait_for("first reply")
        term.type("take your time\r")
        slow = (await fake_llm.wait_for_requests(2, timeout_s=30))[1]
        term.type("\x03")
        async with asyncio.timeout(30):
            await slow.disconnected.wait()  # the model call was really cancelled
        await term.wait_for("Stopped.")
        term.type("again\r")
        await term.wait_for("after the stop")
        term.type("\x04")
        assert await term.exit_code() == 0
    finally:
        term.close()


async def test_serve_on_a_terminal_logs_readable_lines_not_json(terminal_env: dict[str, str], tmp_path: Path) -> None:
    """`make run` by hand: one readable line per event. (Off a terminal, as under systemd, it is JSON: test_daemon.)"""
    env = {**terminal_env, "AGENTHUB_HTTP__PORT": "0", "AGENTHUB_LLM__OFFLINE": "true"}
    term = Terminal(env, tmp_path, ("serve",))
    try:
        await term.wait_for("daemon_ready")  # signal handlers are in place from here on
        lines = [line.strip() for line in term.screen.decode(errors="replace").splitlines() if line.strip()]
        listening = next(line for line in lines if "http_listening" in line)
        assert not listening.startswith("{") and "port=" in listening, listening
        assert not any(line.startswith('{"') for line in lines), lines
        os.kill(term.pid, signal.SIGTERM)
        assert await term.exit_code() == 0
    finally:
        term.close()
