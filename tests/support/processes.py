"""The child processes of the test process, read from /proc: a test's leftovers are found and ended after it.

`KEEP` holds the processes that outlive a test on purpose (the session's PostgreSQL server)."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

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
