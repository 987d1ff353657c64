"""The child processes of the test process, read from /proc: a test's leftovers are found and ended after it.

`KEEP` holds the processes that outlive a test on purpose (the session's PostgreSQL server). `killed_after` runs a
child that writes until it is killed (the crash tests)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

from tests.support.paths import REPO

KEEP: set[int] = set()
"""Processes a session-scoped fixture started during some test and ends itself at the session's end."""


def children(pid: int | None = None) -> set[int]:
    """The live (not zombie) child processes of `pid` (default: this process)."""
    found: set[int] = set()
    tasks = Path(f"/proc/{pid or os.getpid()}/task")
    try:
        entries = list(tasks.iterdir())
    except OSError:
        return found
    for task in entries:
        with contextlib.suppress(OSError):
            found.update(int(p) for p in (task / "children").read_text().split())
    return {p for p in found if alive(p)}


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def describe(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return f"{pid} (gone)"
    return f"{pid} {' '.join(a.decode(errors='replace') for a in argv if a)[:200]}"


def end(pid: int) -> None:
    """SIGKILL `pid` and every process under it (children first), then reap it if it is ours."""
    for child in children(pid):
        end(child)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, 0)


def leftovers(before: set[int]) -> list[int]:
    """Children started since `before` that are still running, apart from `KEEP`."""
    return sorted(children() - before - KEEP)


async def killed_after(code: str, argument: str, lines: int) -> int:
    """Run `python -c code argument` (it prints a growing number after each step it has made durable), read `lines`
    of them, kill it (SIGKILL, also when reading fails) and return the last number it printed."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, argument, cwd=REPO, stdout=asyncio.subprocess.PIPE
    )
    confirmed = -1
    try:
        assert child.stdout is not None
        for _ in range(lines):
            confirmed = int(await asyncio.wait_for(child.stdout.readline(), timeout=30))
    finally:
        child.send_signal(signal.SIGKILL)
        await child.wait()
    return confirmed
