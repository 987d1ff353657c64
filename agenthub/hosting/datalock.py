"""One process writes a data directory at a time: `agenthub serve` holds an exclusive lock file in it."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from agenthub.errors import AgentHubError

LOCK_NAME = ".agenthub.lock"


class DataDirLocked(AgentHubError):
    """Another process holds the data directory."""


class DataDirLock:
    """An advisory `flock` on `<data_dir>/.agenthub.lock`; the file also records the holder's pid and address."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self, info: str = "") -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = read_holder(self.path)
            raise DataDirLocked(
                f"another agenthub serve is already running on {self.path.parent} ({holder or 'unknown holder'})"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid={os.getpid()} {info}".strip().encode())
        self._fd = fd

    def acquire_info(self, info: str) -> None:
        """Record where the holder can be reached (e.g. `http=127.0.0.1:8765`) for `agenthub chat`."""
        if self._fd is None:
            raise RuntimeError("the data directory lock is not held")
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"pid={os.getpid()} {info}".encode(), 0)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def read_holder(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def is_locked(data_dir: Path) -> bool:
    """True when a running daemon holds `data_dir` (used by `agenthub chat` to choose connect mode)."""
    path = data_dir / LOCK_NAME
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def holder_address(data_dir: Path) -> str | None:
    """The `http=HOST:PORT` the running daemon recorded in the lock file, if any."""
    for part in read_holder(data_dir / LOCK_NAME).split():
        if part.startswith("http="):
            return part[len("http=") :]
    return None
