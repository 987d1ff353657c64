"""The commit log `data/.history.log`: every batch of appends, across sessions (history files) and the data
directory's own journals (the inbox, `ROOT`), made durable by one write and one fdatasync of this file; the files
themselves are written without their own fsync, synced at a checkpoint (which then empties the log), and brought up
to date from the log at start after a crash. Blocking: worker threads only."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import structlog

from agenthub.errors import PathRefusedError
from agenthub.storage import jsonl
from agenthub.storage.atomic import fsync_dir
from agenthub.storage.history_handover import Appended, Stat, appended
from agenthub.storage.session_files import ROOT, OpenHistory, SessionFiles, append_payload, cut_back

log = structlog.get_logger(__name__)

LOG_FILE = ".history.log"
CHECKPOINT_BYTES = 32 * 1024 * 1024
"""The log is checkpointed (history files synced, log emptied) once it holds this much."""


@dataclass(frozen=True)
class Append:
    """Whole JSONL lines for the end of `data/<agent>/sessions/<stem>.jsonl`, or (`agent` is `ROOT`) of the data
    directory's file `stem`."""

    agent: str
    stem: str
    payload: bytes


def _entry(item: Append, offset: int) -> bytes:
    """One log entry: a JSON header line naming the file, the offset the lines went to, their length and CRC32,
    then the lines themselves."""
    header = {"a": item.agent, "s": item.stem, "o": offset, "n": len(item.payload), "c": zlib.crc32(item.payload)}
    return json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode() + b"\n" + item.payload


def _entries(data: bytes) -> tuple[list[tuple[Append, int]], int]:
    """The whole, intact entries at the start of `data`, and where they end (a torn or damaged tail, a batch the
    crash cut, ends the log: it was never acknowledged)."""
    found: list[tuple[Append, int]] = []
    pos = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        if end < 0:
            break
        try:
            header = json.loads(data[pos:end])
            agent, stem, offset, size, crc = header["a"], header["s"], header["o"], header["n"], header["c"]
        except (ValueError, KeyError, TypeError):
            break
        payload = data[end + 1 : end + 1 + int(size)]
        if len(payload) != size or zlib.crc32(payload) != crc:
            break
        found.append((Append(str(agent), str(stem), payload), int(offset)))
        pos = end + 1 + len(payload)
    return found, pos


def _hand_over(handing: list[Appended], item: Append, fd: int, before: Stat) -> None:
    """Add the hand-over of `item`, just written; none if reading it fails (a follower then reads the file)."""
    try:
        handing.append(appended(item.agent, item.stem, fd, item.payload, before))
    except OSError:
        log.warning("history_hand_over_skipped", agent=item.agent, exc_info=True)


_HELD: dict[str, list[int]] = {}
"""Data directories whose log this process owns: path -> [locked directory fd, number of logs using it]."""


def _hold(data_dir: Path) -> bool:
    """Own `data_dir`'s log for this process (an flock on the directory, shared by every log of this process), or
    False when another live process owns it (a daemon running while a CLI opens the same files)."""
    where = os.path.realpath(data_dir)
    held = _HELD.get(where)
    if held is not None:
        held[1] += 1
        return True
    try:
        fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    _HELD[where] = [fd, 1]
    return True


def _let_go(data_dir: Path) -> None:
    where = os.path.realpath(data_dir)
    held = _HELD.get(where)
    if held is not None:
        held[1] -= 1
        if held[1] <= 0:
            del _HELD[where]
            os.close(held[0])


class CommitLog:
    """One data directory's commit log over its open history files (this process their only writer). Only the
    process that owns the log replays or empties it: another one (a CLI while the daemon runs) leaves it alone."""

    def __init__(self, data_dir: Path, files: SessionFiles) -> None:
        self.path = data_dir / LOG_FILE
        self._files = files
        self._fd: int | None = None
        self._size = 0
        self._owner: bool | None = None

    def _owns(self) -> bool:
        if not self._owner:  # asked again while another process owns it or the directory is not there yet
            self._owner = _hold(self.path.parent)
        return self._owner

    def commit(
        self, batch: list[Append], *, durable: bool, handed: list[Appended] | None = None
    ) -> list[BaseException | None]:
        """Write each append to its history file, then (durable) every landed one to the log in one write and one
        fdatasync. Returns per append None (landed, durable) or the error that refused it (nothing of it kept):
        a refused directory or file fails its own appends; a failed log write fails the whole batch. `handed`
        (when given) gets the hand-over of every append that landed, in batch order."""
        results: list[BaseException | None] = [None] * len(batch)
        dirs: dict[str, int | BaseException] = {}
        landed: list[tuple[int, OpenHistory, int]] = []
        handing: list[Appended] = []
        for i, item in enumerate(batch):
            try:
                f = self._target(item, dirs)
                before = append_payload(f, item.payload)
                landed.append((i, f, before[1]))
                if handed is not None and item.agent != ROOT:  # the followers index histories only
                    _hand_over(handing, item, f.fd, before)
                f.dirty = durable  # kept open from here to the checkpoint (never evicted in the batch)
            except Exception as e:  # each append gets its own error; the others still land
                results[i] = e
        if durable and landed:
            try:
                self._write(b"".join(_entry(batch[i], offset) for i, _, offset in landed))
            except Exception as e:  # not durable: every append of the batch is taken back
                for i, f, offset in reversed(landed):
                    cut_back(f, offset)
                    results[i] = e
                return results
        if handed is not None:
            handed.extend(handing)
        return results

    def _target(self, item: Append, dirs: dict[str, int | BaseException]) -> OpenHistory:
        """The open file of `item`; an agent's directories are checked once a batch (a refusal fails all of its
        appends in the batch)."""
        if item.agent == ROOT:
            return self._files.data_file(item.stem)
        sessions_fd = dirs.get(item.agent)
        if sessions_fd is None:
            try:
                sessions_fd = dirs[item.agent] = self._files.sessions_dir(item.agent)
            except Exception as e:
                dirs[item.agent] = e
                raise
        if isinstance(sessions_fd, BaseException):
            raise sessions_fd
        return self._files.history(item.agent, sessions_fd, item.stem)

    @property
    def due(self) -> bool:
        """A checkpoint is due: the log is large, or more files wait for it than the cache keeps open."""
        return self._size >= CHECKPOINT_BYTES or self._files.over_bound

    def checkpoint(self) -> None:
        """Sync every history file written since the last checkpoint, then empty the log (durably): from here on
        the files hold on their own what the log held. Before a history file is replaced or removed too, so no
        older entry of the log is ever replayed onto its new content."""
        self._files.sync()
        if not self._owns():  # another process's live log: its entries are not ours to drop
            return
        if self._size or (self._fd is None and self.path.exists()):
            fd = self._open()
            os.ftruncate(fd, 0)
            os.fsync(fd)
            self._size = 0

    def recover(self) -> int:
        """Bring the history files up to date from the log a crash left (idempotent: lines already in their file
        are not written again, a torn line at an entry's place is cut first) and sync them; a damaged tail of the
        log (a batch the crash cut, never acknowledged) is cut off so later batches follow whole entries. The log
        itself is emptied by the next checkpoint. Returns how many entries were applied."""
        if not self._owns():
            if self.path.exists():
                log.warning("history_log_owned_by_another_process")
            return 0
        try:
            data = jsonl.read_bytes_no_follow(self.path)
        except FileNotFoundError:
            return 0
        found, end = _entries(data)
        shifts: dict[tuple[str, str], int] = {}
        applied = 0
        for item, offset in found:
            try:
                applied += self._apply(item, offset, shifts)
            except Exception as e:  # a refused file leaves the others recoverable
                log.error("history_log_entry_not_applied", agent=item.agent, error_type=type(e).__name__)
        self._files.sync()
        if end < len(data):
            log.warning("history_log_tail_cut", bytes=len(data) - end)
            fd = self._open()
            os.ftruncate(fd, end)
            os.fsync(fd)
            self._size = end
        if applied:
            log.warning("history_log_recovered", entries=applied)
        if self._fd is None:  # a reader so far: owns the log again from its first write (a CLI must not keep it)
            self._release()
        return applied

    def _apply(self, item: Append, offset: int, shifts: dict[tuple[str, str], int]) -> int:
        f = self._files.target(item.agent, item.stem)
        at = offset - shifts.get((item.agent, item.stem), 0)
        size = os.fstat(f.fd).st_size
        if size >= at + len(item.payload) and os.pread(f.fd, len(item.payload), at) == item.payload:
            f.dirty = True  # perhaps only in the page cache (a kill, not a power cut): synced before the log empties
            return 0
        if size >= at:
            os.ftruncate(f.fd, at)
        else:  # the file lost more than the log holds (it cannot: a checkpoint synced it); keep what is known
            log.error("history_log_gap", agent=item.agent, missing_bytes=at - size)
            shifts[(item.agent, item.stem)] = shifts.get((item.agent, item.stem), 0) + at - size
        written = os.write(f.fd, item.payload)
        if written != len(item.payload):
            raise OSError(errno.ENOSPC, "short write", f.name)
        f.dirty = True
        return 1

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._release()

    def _release(self) -> None:
        if self._owner:
            _let_go(self.path.parent)
            self._owner = None

    def _open(self) -> int:
        if self._fd is None:
            self._owns()
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
            new = not self.path.exists()
            try:
                self._fd = os.open(self.path, flags, 0o600)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise PathRefusedError("refused a symbolic link inside the data directory") from e
                raise
            self._size = os.fstat(self._fd).st_size
            if new:
                fsync_dir(self.path.parent)  # the log's own name survives a power cut
        return self._fd

    def _write(self, payload: bytes) -> None:
        """Append `payload` and fdatasync: all or nothing (cut back on a failed or short write or sync)."""
        fd = self._open()
        size = self._size
        try:
            written = os.write(fd, payload)
            if written != len(payload):
                raise OSError(errno.ENOSPC, f"short write: {written} of {len(payload)} bytes", str(self.path))
            os.fdatasync(fd)
        except BaseException:
            try:
                os.ftruncate(fd, size)
            except OSError:
                log.exception("history_log_cut_back_failed")
            raise
        self._size = size + len(payload)
