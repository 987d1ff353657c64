"""The per-agent directory layout of design §4, with every path checked to stay inside its directory."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from agenthub.errors import PathRefusedError, StorageError
from agenthub.session.keys import SessionKey, validate_agent_name


@functools.lru_cache(maxsize=4096)
def _resolved_dir(directory: Path) -> Path:
    """A directory's resolved path, cached: resolving walks every component with an lstat, on the hot path.

    Safe to cache because every caller checks, at each call, that the directory itself is not a link
    (`AgentLayout` also checks each of its directories below the data directory)."""
    return directory.resolve()


@functools.lru_cache(maxsize=65536)
def _check_plain_name(name: str) -> None:
    if not name or "/" in name or "\\" in name or "\x00" in name or name in (".", ".."):
        raise PathRefusedError("refused a file name that is not a plain name")


def refuse_link(path: Path) -> Path:
    """`path`, refused (StorageError) if it is a symbolic link now: one lstat, never cached, so a link planted
    after an earlier check is still refused at the next write. Files are then opened with O_NOFOLLOW."""
    if path.is_symlink():
        raise PathRefusedError("refused a symbolic link inside the data directory")
    return path


def inside(directory: Path, name: str, *, directory_may_link: bool = False) -> Path:
    """`directory / name`, refused unless it is a plain name that is not a link (defence in depth after the key
    factory). The directory itself must not be a link either, unless the caller says it is the operator's
    (`data_dir` may be a link to another disk; what lies below it may not).
    """
    _check_plain_name(name)
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

    # Every property checks its directories for links each time it is read, so a path computed right before a
    # write is checked at write time.

    @property
    def root(self) -> Path:
        return inside(self.data_dir, self.agent, directory_may_link=True)

    @property
    def sessions_dir(self) -> Path:
        return refuse_link(self.root / "sessions")

    @property
    def archive_dir(self) -> Path:
        return refuse_link(self.sessions_dir / "archive")

    @property
    def memory_dir(self) -> Path:
        return refuse_link(self.root / "memory")

    @property
    def memory_file(self) -> Path:
        return inside(self.memory_dir, "MEMORY.md")

    def history_file(self, key: SessionKey) -> Path:
        self._check_owner(key)
        return inside(self.sessions_dir, key.file_stem + ".jsonl")

    def meta_file(self, key: SessionKey) -> Path:
        self._check_owner(key)
        return inside(self.sessions_dir, key.file_stem + ".meta.json")

    def archive_file(self, key: SessionKey) -> Path:
        self._check_owner(key)
        return inside(self.archive_dir, key.file_stem + ".jsonl")

    def _check_owner(self, key: SessionKey) -> None:
        if key.agent != self.agent:
            raise StorageError(f"session {key} does not belong to agent {self.agent}")
