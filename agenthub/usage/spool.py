"""`UsageSpool`: the usage rows a process has not stored yet, in a local append-only file, so a kill loses none.

Each process appends its rows to its own file (`data/usage-spool/<pid>-<random>.jsonl`, held under an exclusive
`flock` while it lives) the moment the recorder sees them, on the spool's writer thread (never on the event loop):
the rows and notes waiting when the thread gets to them go in one `write` to the page cache, no `fsync` (a killed
process's writes are the kernel's already). After a write to the store the spool notes how many
of its rows are stored (`{"stored": n}`; emptied when none wait). At start, the files whose lock nobody holds are a
dead process's: their rows not noted as stored are handed back (`recover`), to be written if the store lacks them
(a kill between the store's write and the note), and the file is deleted once they are.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import uuid
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

import structlog

from agenthub.storage.usage import UsageRow
from agenthub.storage.writer_thread import WriterThread

log = structlog.get_logger(__name__)

_FIELDS = tuple(f.name for f in fields(UsageRow))
_encode = json.JSONEncoder(ensure_ascii=False).encode

SPOOL_DIR = "usage-spool"
"""The spools' folder under the data directory."""


class UsageSpool:
    """This process's spool file under `root` (created on first use)."""

    def __init__(self, root: Path, thread: WriterThread | None = None) -> None:
        self.root = root
        self.path = root / f"{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
        self._fd: int | None = None
        self._broken = False
        self._used = False  # rows were given (so the file exists, or is about to)
        self._waiting: list[str | None] = []  # texts to append, None: empty the file; in the order given
        self._waiting_lock = threading.Lock()
        self.thread = thread if thread is not None else WriterThread("usage-spool")
        """Where the file is written (every write in the order given): given the history writer's, a row seen
        before a turn's answer is appended is in the spool before that answer is in its history."""

    def _open(self) -> int | None:
        if self._fd is None and not self._broken:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._fd = fd
            except OSError as e:  # the rows then live in memory only, as before
                self._broken = True
                log.warning("usage_spool_unavailable", path=str(self.path), error=str(e))
        return self._fd

    def _give(self, item: str | None) -> None:
        """Queue a write for the thread; one hand-over for all that waits until it drains."""
        with self._waiting_lock:
            self._waiting.append(item)
            first = len(self._waiting) == 1
        if first:
            self.thread.post(self._drain)

    def _drain(self) -> None:
        """On the writer thread (or at `close`): everything waiting, consecutive texts in one write."""
        with self._waiting_lock:
            items, self._waiting = self._waiting, []
        texts: list[str] = []
        for item in items:
            if item is not None:
                texts.append(item)
                continue
            texts = []  # emptied next: what waited before is stored, never written
            self._empty()
        if texts:
            self._write("".join(texts))

    def _write(self, text: str) -> None:
        fd = self._open()
        if fd is None:
            return
        try:
            os.write(fd, text.encode("utf-8"))
        except OSError as e:
            log.warning("usage_spool_write_failed", error=str(e))

    def _empty(self) -> None:
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
        except OSError as e:
            log.warning("usage_spool_write_failed", error=str(e))

    def append(self, rows: Sequence[UsageRow]) -> None:
        """Rows the recorder now holds in memory (written by the spool's thread, ahead of every later write this
        process makes there: a kill after the turn's answer was written loses none)."""
        self._used = True
        self._give("".join(_encode({name: getattr(r, name) for name in _FIELDS}) + "\n" for r in rows))

    def stored(self, count: int, *, nothing_waits: bool) -> None:
        """The oldest `count` rows not yet noted are in the store; `nothing_waits`: the file is emptied instead."""
        if not self._used or count <= 0:
            return
        self._give(None if nothing_waits else json.dumps({"stored": count}) + "\n")

    def close(self, *, nothing_waits: bool) -> None:
        """End of the process (blocking: waits for the thread): the file goes when every row reached the store (else
        a next start recovers it)."""
        self.thread.close()
        self._drain()
        if self._fd is None:
            return
        if nothing_waits:
            with contextlib.suppress(OSError):
                self.path.unlink()
        os.close(self._fd)  # releases the lock
        self._fd = None

    def recover(self) -> list[tuple[Path, list[UsageRow]]]:
        """Every dead process's spool (a file nobody holds locked) with its rows not noted as stored."""
        found: list[tuple[Path, list[UsageRow]]] = []
        if not self.root.is_dir():
            return found
        for path in sorted(self.root.glob("*.jsonl")):
            if path == self.path:
                continue
            try:
                rows = _unstored_rows(path)
            except BlockingIOError:
                continue  # a live process's
            except OSError as e:
                log.warning("usage_spool_unreadable", path=str(path), error=str(e))
                continue
            found.append((path, rows))
        return found


def _unstored_rows(path: Path) -> list[UsageRow]:
    """The rows of a spool whose lock is free (`BlockingIOError` while its process lives)."""
    with path.open("rb") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        lines = f.read().decode("utf-8", errors="replace").splitlines()
    rows: list[UsageRow] = []
    stored = 0
    for line in lines:
        try:
            data = json.loads(line)
            if "stored" in data:
                stored += int(data["stored"])
            else:
                rows.append(UsageRow(**data))
        except (ValueError, TypeError):
            log.warning("usage_spool_line_skipped", path=str(path))  # a line the kill cut
    return rows[stored:]


def forget_spool(path: Path) -> None:
    """A recovered spool's rows are all in the store: the file goes."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
