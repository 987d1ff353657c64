"""The per-agent directory layout of design §4, with every path checked to stay inside its directory."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from agenthub.errors import StorageError
from agenthub.session.keys import SessionKey, validate_agent_name


@functools.lru_cache(maxsize=4096)
def _resolved_dir(directory: Path) -> Path:
    """A directory's resolved path, cached: resolving walks every component with an lstat, on the hot path."""
    return directory.resolve()


@functools.lru_cache(maxsize=65536)
def inside(directory: Path, name: str) -> Path:
    """`directory / name`, refused unless it resolves inside `directory` (defence in depth after the key factory).

    The name must be a plain name; a symlink is resolved to make sure it does not lead out of the directory.
    Accepted paths are cached (this runs several times per turn): a link planted later inside the data
    directory is not looked at again, which needs write access to the data directory in the first place.
    """
    if not name or "/" in name or "\\" in name or "\x00" in name or name in (".", ".."):
        raise StorageError("refused a file name that is not a plain name")
    base = _resolved_dir(directory)
    path = base / name
    if path.is_symlink() and path.resolve().parent != base:
        raise StorageError("refused a path outside its directory")
    return path


@dataclass(frozen=True)
class AgentLayout:
    """Where one agent's files live under `data_dir`."""

    data_dir: Path
    agent: str

    def __post_init__(self) -> None:
        validate_agent_name(self.agent)

    @property
    def root(self) -> Path:
        return inside(self.data_dir, self.agent)

    @property
    def sessions_dir(self) -> Path:
        return self.root / "sessions"

    @property
    def archive_dir(self) -> Path:
        return self.sessions_dir / "archive"

    @property
    def memory_dir(self) -> Path:
        return self.root / "memory"

    @property
    def memory_file(self) -> Path:
        return self.memory_dir / "MEMORY.md"

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
