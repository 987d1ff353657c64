"""Session history files kept open: the sessions directories as directory fds and the history files as cached fds
(a bound, least recently used evicted), so an append is one write on an fd already held, checked against links
with one-name lookups in its directory instead of a walk of the whole path; the same for the data directory's own
append-only files (the inbox journal, `ROOT`). Blocking: worker threads only."""

from __future__ import annotations

import errno
import os
import stat
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from agenthub.errors import PathRefusedError
from agenthub.storage import jsonl
from agenthub.storage.history_handover import Stat, stat_of

log = structlog.get_logger(__name__)

ROOT = ""
"""The `agent` naming the data directory itself: its file `stem` is the whole name (`.inbox.jsonl`); no agent is
named by the empty string."""

MAX_OPEN = 256
"""History files kept open per store; a file written since the last checkpoint stays open until it."""

_REFUSED = "refused a symbolic link inside the data directory"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class _Dir:
    fd: int
    ino: int


@dataclass
class _AgentDirs:
    root: _Dir
    sessions: _Dir
    created_files: bool = False  # a history file was created in `sessions` since the last checkpoint


@dataclass
class OpenHistory:
    """One history file held open: its fd, inode and the sessions directory it was opened in."""

    fd: int
    ino: int
    dir_ino: int
    name: str
    dirty: bool = False  # written since the last checkpoint, not yet fsynced itself
    seen: Stat | None = None  # its stat from the lookup that just handed it out (taken by the next append)
    end: int = -1  # where this process's last append ended (the file then ends with a whole line); -1: unknown


@dataclass
class _Fds:
    """Every fd the cache holds (closed when the cache is dropped, also without `close()`)."""

    data: int | None = None
    data_ino: int = 0
    root_created: bool = False  # a file was created in the data directory since the last checkpoint
    agents: dict[str, _AgentDirs] = field(default_factory=dict)
    files: OrderedDict[tuple[str, str], OpenHistory] = field(default_factory=OrderedDict)

    def close(self) -> None:
        for f in self.files.values():
            _close(f.fd)
        for dirs in self.agents.values():
            _close(dirs.sessions.fd)
            _close(dirs.root.fd)
        if self.data is not None:
            _close(self.data)
        self.files.clear()
        self.agents.clear()
        self.data = None


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        log.warning("session_file_close_failed")


def _lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    """The entry `name` in the directory `dir_fd`, not followed; None when there is none."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _ino(found: os.stat_result | None) -> int | None:
    return None if found is None else found.st_ino


def _refuse_link(found: os.stat_result | None) -> None:
    if found is not None and stat.S_ISLNK(found.st_mode):
        raise PathRefusedError(_REFUSED)


def _open_at(dir_fd: int, name: str, flags: int, mode: int = 0o600) -> int:
    try:
        return os.open(name, flags, mode, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PathRefusedError(_REFUSED) from e
        raise


def _open_dir(parent_fd: int, name: str) -> _Dir:
    """`name` below `parent_fd`, created when missing, refused when it is a link."""
    _refuse_link(_lstat_at(parent_fd, name))
    try:
        os.mkdir(name, 0o700, dir_fd=parent_fd)
    except FileExistsError:
        pass
    fd = _open_at(parent_fd, name, _DIR_FLAGS)
    return _Dir(fd, os.fstat(fd).st_ino)


class SessionFiles:
    """The open sessions directories and history files of one data directory (its only writer)."""

    def __init__(self, data_dir: Path, *, max_open: int = MAX_OPEN) -> None:
        self._data_dir = data_dir
        self._max_open = max_open
        self._fds = _Fds()
        weakref.finalize(self, self._fds.close)

    def sessions_dir(self, agent: str) -> int:
        """The fd of `data/<agent>/sessions/` (created when missing), checked now: the agent directory and the
        sessions directory are each looked up once (not followed) and refused when a link stands there; one that
        was moved away or replaced is opened again."""
        data = self._data_fd()
        dirs = self._fds.agents.get(agent)
        if dirs is not None:
            root, sessions = _lstat_at(data, agent), _lstat_at(dirs.root.fd, "sessions")
            _refuse_link(root)
            _refuse_link(sessions)
            if (_ino(root), _ino(sessions)) == (dirs.root.ino, dirs.sessions.ino):
                return dirs.sessions.fd
            self._drop_agent(agent)
        root_dir = _open_dir(data, agent)
        try:
            sessions_dir = _open_dir(root_dir.fd, "sessions")
        except BaseException:
            _close(root_dir.fd)
            raise
        self._fds.agents[agent] = _AgentDirs(root_dir, sessions_dir)
        return sessions_dir.fd

    def _data_fd(self) -> int:
        if self._fds.data is None:
            self._data_dir.mkdir(parents=True, exist_ok=True)
            self._fds.data = os.open(self._data_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # may be a link
            self._fds.data_ino = os.fstat(self._fds.data).st_ino
        return self._fds.data

    def target(self, agent: str, stem: str) -> OpenHistory:
        """`history` of `agent`'s `stem`, or (`agent` is `ROOT`) the data directory's own file `stem`."""
        if agent == ROOT:
            return self.data_file(stem)
        return self.history(agent, self.sessions_dir(agent), stem)

    def data_file(self, name: str) -> OpenHistory:
        """The open file `name` directly in the data directory (created when missing), refused when it is a link;
        one replaced behind the cache's back (an atomic rewrite) is opened again by its name."""
        data = self._data_fd()
        found = _lstat_at(data, name)
        _refuse_link(found)
        opened = self._cached((ROOT, name), data, self._fds.data_ino, name, found)
        if found is None:
            self._fds.root_created = True
        return opened

    def history(self, agent: str, sessions_fd: int, stem: str) -> OpenHistory:
        """The open history file `<stem>.jsonl` of `agent` (created when missing). Refused when it or the meta
        beside it is a link now (the meta too: a link planted there refuses the append before anything is
        written); a file replaced behind the cache's back is opened again by its name."""
        meta_name, name = stem + ".meta.json", stem + ".jsonl"
        _refuse_link(_lstat_at(sessions_fd, meta_name))
        found = _lstat_at(sessions_fd, name)
        _refuse_link(found)
        opened = self._cached((agent, stem), sessions_fd, self._fds.agents[agent].sessions.ino, name, found)
        if found is None:
            self._fds.agents[agent].created_files = True
        return opened

    def _cached(
        self, key: tuple[str, str], dir_fd: int, dir_ino: int, name: str, found: os.stat_result | None
    ) -> OpenHistory:
        """The cached fd of `key` while it is still the file `found` at `name` in the same directory, else `name`
        opened (created when missing) in `dir_fd`."""
        cached = self._fds.files.get(key)
        if cached is not None:
            if found is not None and found.st_ino == cached.ino and cached.dir_ino == dir_ino:
                self._fds.files.move_to_end(key)
                cached.seen = (found.st_ino, found.st_size, found.st_mtime_ns)  # the same file: its stat now
                return cached
            self._drop_file(key)
        self._evict(room=1)
        fd = _open_at(dir_fd, name, _FILE_FLAGS)
        opened = OpenHistory(fd, os.fstat(fd).st_ino, dir_ino, name)
        self._fds.files[key] = opened
        return opened

    def forget(self, agent: str, stem: str) -> None:
        """Close `stem`'s history (it is about to be replaced or removed); fsynced first when written to."""
        self._drop_file((agent, stem))

    def dirty(self) -> list[OpenHistory]:
        return [f for f in self._fds.files.values() if f.dirty]

    def sync(self) -> None:
        """Make every write since the last call durable in the history files themselves: each written file
        fdatasync'ed, each sessions directory that got a new file fsynced (the checkpoint of the commit log)."""
        for f in self.dirty():
            os.fdatasync(f.fd)
            f.dirty = False
        for dirs in self._fds.agents.values():
            if dirs.created_files:
                os.fsync(dirs.sessions.fd)
                dirs.created_files = False
        if self._fds.root_created and self._fds.data is not None:
            os.fsync(self._fds.data)
            self._fds.root_created = False
        self._evict()

    def close(self) -> None:
        self._fds.close()

    def _evict(self, room: int = 0) -> None:
        """Close the least recently used clean files beyond the bound, leaving `room` below it (a dirty one waits
        for the checkpoint)."""
        files = self._fds.files
        excess = len(files) + room - self._max_open
        if excess <= 0:
            return
        for key in [k for k, f in files.items() if not f.dirty][:excess]:
            _close(files.pop(key).fd)

    def _drop_file(self, key: tuple[str, str]) -> None:
        f = self._fds.files.pop(key, None)
        if f is None:
            return
        try:
            if f.dirty:
                os.fdatasync(f.fd)
        finally:
            _close(f.fd)

    def _drop_agent(self, agent: str) -> None:
        for key in [k for k in self._fds.files if k[0] == agent]:
            self._drop_file(key)
        dirs = self._fds.agents.pop(agent)
        if dirs.created_files:
            try:
                os.fsync(dirs.sessions.fd)
            except OSError:
                log.warning("sessions_dir_sync_failed", agent=agent)
        _close(dirs.sessions.fd)
        _close(dirs.root.fd)

    @property
    def over_bound(self) -> bool:
        """More files wait for the checkpoint than the bound keeps open (asked after every batch: no more files
        open than the bound is the common case, answered without looking at each)."""
        files = self._fds.files
        return len(files) > self._max_open and sum(1 for f in files.values() if f.dirty) > self._max_open


def append_payload(f: OpenHistory, payload: bytes) -> Stat:
    """Write `payload` (whole lines) at the end of `f` in one write, first cutting a torn tail left by a crash back
    to its last newline. Returns the file's stat just before the write (its size: the offset where the lines
    start); all or nothing (a short write is cut back, ENOSPC). The stat is the lookup's that handed `f` out when
    there was one (the same inode, just now), and the last byte is only read when the file does not end where this
    process's last append to it ended."""
    before, f.seen = (f.seen if f.seen is not None else stat_of(f.fd)), None
    size = before[1]
    if size and size != f.end and os.pread(f.fd, 1, size - 1) != b"\n":
        jsonl.repair_torn_tail(f.fd, Path(f.name))
        before = stat_of(f.fd)
        size = before[1]
    f.end = -1
    try:
        written = os.write(f.fd, payload)
        if written != len(payload):
            raise OSError(errno.ENOSPC, f"short write: {written} of {len(payload)} bytes", f.name)
    except BaseException:
        cut_back(f, size)
        raise
    f.end = size + written
    return before


def cut_back(f: OpenHistory, size: int) -> None:
    f.end = -1
    try:
        os.ftruncate(f.fd, size)
    except OSError:  # the torn line left behind is skipped on load and cut by the next append
        log.exception("history_cut_back_failed", file=f.name, size=size)
    else:
        log.warning("history_append_undone", file=f.name, size=size)
