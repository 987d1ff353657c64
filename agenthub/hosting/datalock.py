"""One process writes a data directory at a time: `agenthub serve` (or a command that opens the data itself:
`agenthub chat` without a daemon, `forget`, `store migrate`) holds an exclusive lock file in it."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from agenthub import i18n
from agenthub.errors import AgentHubError

LOCK_NAME = ".agenthub.lock"
DAEMON = "serve"
"""The role `agenthub serve` records in the lock file (an older daemon recorded none)."""


class DataDirLocked(AgentHubError):
    """Another process holds the data directory; `holder` is what it recorded (`pid=… ROLE http=…`)."""

    def __init__(self, data_dir: Path, holder: str) -> None:
        super().__init__(f"another agenthub process is already running on {data_dir} ({holder or 'unknown holder'})")
        self.data_dir, self.holder = data_dir, holder


class DataDirLock:
    """An advisory `flock` on `<data_dir>/.agenthub.lock`; the file also records the holder's pid, role (the
    command: `serve`, `chat`, `forget`, …) and address."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / LOCK_NAME
        self._fd: int | None = None
        self._role = ""

    def acquire(self, info: str = "") -> None:
        """Hold the directory, recording `info` (the role first); `DataDirLocked` while another process holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirLocked(self.path.parent, read_holder(self.path)) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid={os.getpid()} {info}".strip().encode())
        self._fd, self._role = fd, info

    def acquire_info(self, info: str) -> None:
        """Record where the holder can be reached (e.g. `http=127.0.0.1:8765`) for `agenthub chat`, after its role."""
        if self._fd is None:
            raise RuntimeError("the data directory lock is not held")
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, " ".join(filter(None, (f"pid={os.getpid()}", self._role, info))).encode(), 0)

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


def holder_role(holder: str) -> str:
    """The command a holder recorded (`serve`, `chat`, `forget`, `store migrate`; "" for an older daemon)."""
    return " ".join(part for part in holder.split() if "=" not in part)


def is_daemon(holder: str) -> bool:
    """The holder that recorded `holder` is `agenthub serve` (a client goes through it), not another command."""
    return holder_role(holder) in ("", DAEMON)


def daemon_holds(data_dir: Path) -> bool:
    """True when a running daemon holds `data_dir`."""
    return is_locked(data_dir) and is_daemon(read_holder(data_dir / LOCK_NAME))


def busy_text(refused: DataDirLocked, locale: str) -> str:
    """Why a command that opens the data itself cannot start: which command holds the directory, in `locale`."""
    role = holder_role(refused.holder) or DAEMON
    return i18n.text("cli.data_dir_busy", locale, data_dir=refused.data_dir, role=role, holder=refused.holder)


def holder_address(data_dir: Path) -> str | None:
    """The `http=HOST:PORT` the running daemon recorded in the lock file, if any."""
    for part in read_holder(data_dir / LOCK_NAME).split():
        if part.startswith("http="):
            return part[len("http=") :]
    return None
