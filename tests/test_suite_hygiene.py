"""The suite beside a running daemon: a test that fails still ends the processes it started, and tests run while
`make run` holds the default port (8765) in the same checkout."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from agenthub.config import HTTPSettings
from agenthub.hosting.app import build_gateway, web_server
from tests.support import processes
from tests.support.cli import cli_env
from tests.support.paths import REPO
from tests.support.roots import make_settings

DEFAULT_PORT = HTTPSettings().port
READY_TIMEOUT_S = 90.0
"""A bound on a cold start on a loaded 2-core machine, not a measurement."""

TAKEOVER_TEST = (
    "tests/channel/test_inbox_takeover.py::"
    "test_readyz_is_503_while_the_instance_lease_is_not_held_and_ready_once_it_is_again"
)
LEAKING_TEST = """
import subprocess, sys
from pathlib import Path

def test_starts_a_process_then_fails():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    Path({pid_file!r}).write_text(str(child.pid))
    assert False, "failed on purpose"
"""


async def run_pytest(*args: str, cwd: Path = REPO) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args,
        cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 300)
    finally:
        if proc.returncode is None:
            processes.end(proc.pid)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


async def test_a_failing_test_still_ends_the_process_it_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    test_file = tmp_path / "test_leak.py"
    test_file.write_text(textwrap.dedent(LEAKING_TEST.format(pid_file=str(pid_file))))
    code, out = await run_pytest("-p", "tests.conftest", "--rootdir", str(REPO), "-c", str(REPO / "pyproject.toml"),
                                 str(test_file))  # fmt: skip
    pid = int(pid_file.read_text())
    assert code == 1, out
    assert "failed on purpose" in out and "left 1 process(es) running" in out, out
    assert not processes.alive(pid), f"the test's child {pid} still runs"


def port_is_busy(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest_asyncio.fixture
async def daemon_on_the_default_port(tmp_path: Path) -> AsyncIterator[None]:
    """`make run` in a checkout of its own: `agenthub serve` with no port configured, offline. Should another
    program hold the default port already, it stays busy all the same: that is the case under test."""
    root = tmp_path / "checkout"
    root.mkdir()
    env = {**cli_env(root, None), "PYTHONPATH": str(REPO), "HOME": str(root)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agenthub", "serve", env=env, cwd=root,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            while not port_is_busy(DEFAULT_PORT):
                assert proc.returncode is None or port_is_busy(DEFAULT_PORT), "the daemon exited"
                await asyncio.sleep(0.1)
        yield
    finally:
        processes.end(proc.pid)
        await proc.wait()


async def test_tests_run_while_a_daemon_holds_the_default_port(
    daemon_on_the_default_port: None, tmp_path: Path
) -> None:
    assert port_is_busy(DEFAULT_PORT)
    settings = make_settings(tmp_path / "test")
    async with build_gateway(settings) as gateway:
        server = web_server(settings, gateway)
        await server.start()  # what every test that serves HTTP does
        try:
            assert server.port != DEFAULT_PORT
        finally:
            await server.close()
    code, out = await run_pytest("-q", TAKEOVER_TEST)  # bound the default port before
    assert code == 0, out
