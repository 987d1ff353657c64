"""Crash-safe whole-file writes: temp file, fsync, os.replace, fsync of the directory; and the start-up sweep of
the temp files a killed process left."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Iterable
from pathlib import Path

TEMP_NAME = re.compile(r"^\..+?\.(?P<pid>\d+)(?:\.[0-9a-f]{12})?\.tmp$")
"""`.<name>.<pid>.<random>.tmp` (random: 12 hex digits, sometimes all of them digits, so the name is matched
shortest first: the pid is the first all-digit part it can be), and the older `.<name>.<pid>.tmp`."""


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new file in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path_for(path: Path) -> Path:
    """A temp name beside `path`, unique per write: `.<name>.<pid>.<random>.tmp` (two writers never share one)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new content, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path_for(path)
    try:
        with tmp.open("xb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    if durable:
        fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str, *, durable: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable)


def _writer_gone(pid: int) -> bool:
    """True when no other running process has this pid (our own pid counts as gone: under a container, a
    restarted daemon often gets the pid its killed predecessor had)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # OverflowError: no process can have that number
        return True
    except PermissionError:  # a process of another user is alive
        return False
    return False


def remove_stale_temp_files(roots: Iterable[Path]) -> int:
    """Remove, recursively under `roots`, the temp files of atomic writes whose writer died (killed mid-write);
    a temp file of a still running process is left alone. Call it before this process writes anything.
    Returns how many were removed."""
    removed = 0
    for root in roots:
        if not root.is_dir():
            continue
        for path in root.rglob(".*.tmp"):
            found = TEMP_NAME.match(path.name)
            if found is None or not path.is_file() or not _writer_gone(int(found["pid"])):
                continue
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed += 1
    return removed
