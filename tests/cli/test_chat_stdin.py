"""`agenthub chat` with nothing to read (stdin at EOF, or closed): exit 0 at once, no traceback, no model call."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from tests.support.cli import cli_env
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.paths import REPO

BOUND_S = 60.0
"""A cold interpreter's start on a loaded machine: a bound on a hang, not a measure."""


async def _chat(root: Path, llm: FakeAnthropic, shell: str) -> tuple[int, str, str]:
    """`python -m agenthub chat` run by `sh -c`, whose redirection sets up its stdin; exit code, stdout, stderr."""
    env = {**cli_env(root, llm), "PYTHONPATH": str(REPO), "LANG": "en_US.UTF-8"}
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", f'exec "$0" -m agenthub chat {shell}', sys.executable, env=env, cwd=root,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), BOUND_S)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.parametrize("shell", ["< /dev/null", "<&-"], ids=["at-eof", "closed"])
async def test_chat_with_nothing_to_read_exits_0_at_once(tmp_path: Path, fake_llm: FakeAnthropic, shell: str) -> None:
    code, out, err = await _chat(tmp_path, fake_llm, shell)
    assert code == 0, err
    assert "Traceback" not in err and err.strip() == "", err
    assert out.strip() == "", out
    assert fake_llm.requests == []
