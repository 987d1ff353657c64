"""A real pseudo-terminal running `python -m agenthub …`, for tests that type keys and read what it prints."""

from __future__ import annotations

import asyncio
import os
import pty
import sys
from pathlib import Path


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
