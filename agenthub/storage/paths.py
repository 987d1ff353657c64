"""The per-agent directory layout of design §4, with every path checked to stay inside its directory."""

from __future__ import annotations

import functools
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from agenthub.errors import PathRefusedError, StorageError
from agenthub.session_keys import SessionKey, validate_agent_name


@functools.lru_cache(maxsize=4096)
def _resolved_dir(directory: Path) -> Path:
    """A directory's resolved path, cached: resolving walks every component with an lstat, on the hot path.

    Safe to cache because every caller checks, at each call, that the directory itself is not a link
    (`AgentLayout` also checks each of its directories below the data directory)."""
    return directory.resolve()


@functools.lru_cache(maxsize=65536)
def check_plain_name(name: str) -> None:
    """Refuse (PathRefusedError) a name that is not one plain file name."""
    if not name or "/" in name or "\\" in name or "\x00" in name or name in (".", ".."):
        raise PathRefusedError("refused a file name that is not a plain name")


def _is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False


def refuse_link(path: Path) -> Path:
    """`path`, refused (PathRefusedError) if it is a symbolic link now: one lstat, never cached, so a link planted
    after an earlier check is still refused at the next write. Files are then opened with O_NOFOLLOW."""
    if _is_link(path):
        raise PathRefusedError("refused a symbolic link inside the data directory")
    return path


def _plain_child(directory: Path, name: str) -> Path:
    check_plain_name(name)
    return refuse_link(directory / name)


def inside(directory: Path, name: str, *, directory_may_link: bool = False) -> Path:
    """`directory / name`, refused unless it is a plain name that is not a link (defence in depth after the key
    factory). The directory itself must not be a link either, unless the caller says it is the operator's
    (`data_dir` may be a link to another disk; what lies below it may not).
    """
    check_plain_name(name)
    if not directory_may_link:
        refuse_link(directory)
    return refuse_link(_resolved_dir(directory) / name)


@dataclass(frozen=True)
class AgentLayout:
    """Where one agent's files live under `data_dir`."""

    data_dir: Path
    agent: str

    def __post_init__(self) -> None:
        validate_agent_name(self.agent)

    # The paths are built once; every property checks each directory below `data_dir` for links each time it is
    # read (an lstat per level), so a path computed right before a write is checked at write time.

    @functools.cached_property
    def _root(self) -> Path:
        return inside(self.data_dir, self.agent, directory_may_link=True)

    @functools.cached_property
    def _sessions(self) -> Path:
        return self._root / "sessions"

    @property
    def root(self) -> Path:
        return refuse_link(self._root)

    @property
    def sessions_dir(self) -> Path:
        refuse_link(self._root)
        return refuse_link(self._sessions)

    @property
    def archive_dir(self) -> Path:
        return refuse_link(self.sessions_dir / "archive")

    @property
    def memory_dir(self) -> Path:
        return refuse_link(self.root / "memory")

    @property
    def memory_file(self) -> Path:
        return _plain_child(self.memory_dir, "MEMORY.md")

    def history_file(self, key: SessionKey) -> Path:
        self._check_owner(key)
        return _plain_child(self.sessions_dir, key.file_stem + ".jsonl")

    def meta_file(self, key: SessionKey) -> Path:
        self._check_owner(key)
        return _plain_child(self.sessions_dir, key.file_stem + ".meta.json")

    def archive_file(self, key: SessionKey) -> Path:
        self._check_owner(key)
        return _plain_child(self.archive_dir, key.file_stem + ".jsonl")

    def _check_owner(self, key: SessionKey) -> None:
        if key.agent != self.agent:
            raise StorageError(f"session {key} does not belong to agent {self.agent}")
