"""The CLI in a real pseudo-terminal: Ctrl-C (the terminal's byte, not a signal) stops a slow reply in `agenthub chat`,
and `agenthub serve` run by hand logs readable lines."""

from __future__ import annotations

import asyncio
import os
import pty
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import cli_env
from tests.support.fakes.anthropic import FakeAnthropic, hang, reply_text


class Terminal:
    """The master side of a pty whose child runs `python -m agenthub <args>` (`chat` by default); collects everything
    it prints."""

    def __init__(self, env: dict[str, str], cwd: Path, args: tuple[str, ...] = ("chat",)) -> None:
        pid, fd = pty.fork()  # the child gets the pty as its controlling terminal, so ^C could raise SIGINT
        if pid == 0:  # pragma: no cover - the child
            os.chdir(cwd)
            os.execve(sys.executable, [sys.executable, "-m", "agenthub", *args], env)
        self.pid, self.fd, self.reaped = pid, fd, False
        self.screen = bytearray()
        self._changed = asyncio.Event()
        asyncio.get_running_loop().add_reader(fd, self._read)

    def _read(self) -> None:
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(self.fd)
        self.screen.extend(data)
        self._changed.set()

    def type(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    async def wait_for(self, text: str, timeout_s: float = 30.0) -> None:
        async with asyncio.timeout(timeout_s):
            while text.encode() not in self.screen:
                self._changed.clear()
                await self._changed.wait()

    async def exit_code(self, timeout_s: float = 30.0) -> int:
        async with asyncio.timeout(timeout_s):
            _, status = await asyncio.to_thread(os.waitpid, self.pid, 0)
        self.reaped = True
        return os.waitstatus_to_exitcode(status)

    def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self.fd)
        os.close(self.fd)
        if not self.reaped:  # only our own child, and only while it is still ours
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)


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
