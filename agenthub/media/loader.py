"""Reading saved images for a request: off the event loop, cached per file, refusing paths outside the workspace."""

from __future__ import annotations

import asyncio
import base64
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

CACHE_BYTES = 64 * 1024 * 1024
"""The cache holds at most this many base64 characters (the newest used kept)."""


@dataclass(frozen=True)
class LoadedImage:
    media_type: str
    data: str
    """The file's bytes, base64-encoded, as the request carries them."""


_Version = tuple[int, int]


class ImageCache:
    """Base64 of saved images, keyed by path and checked against the file's size and mtime at every load (one
    stat per image, in the same worker-thread hop), so a file deleted by "forget" is never sent from memory."""

    def __init__(self, max_chars: int = CACHE_BYTES) -> None:
        self.max_chars = max_chars
        self._entries: OrderedDict[Path, tuple[_Version, str]] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()  # turns of several chats read in worker threads at once

    def clear(self) -> None:
        """Drop every image kept (a forget: the pictures of deleted files leave memory now, not at their next load)."""
        with self._lock:
            self._entries.clear()
            self._chars = 0

    async def load(self, workspace: Path, refs: Iterable[tuple[str, str]]) -> dict[str, LoadedImage]:
        """The images of `refs` (path relative to `workspace`, media type) that exist; missing ones are left out."""
        wanted = dict(refs)
        if not wanted:
            return {}
        found = await asyncio.to_thread(self._read_all, workspace, list(wanted))
        return {path: LoadedImage(wanted[path], data) for path, data in found.items()}

    def _read_all(self, workspace: Path, paths: list[str]) -> dict[str, str]:
        root = workspace.resolve()
        found: dict[str, str] = {}
        for relative in paths:
            data = self._read_one(root, relative)
            if data is not None:
                found[relative] = data
        return found

    def _read_one(self, root: Path, relative: str) -> str | None:
        path = (root / relative).resolve()
        if not path.is_relative_to(root) or path == root:
            log.warning("media_ref_outside_workspace", path=relative)
            return None
        try:
            info = os.stat(path)
            version = (info.st_size, info.st_mtime_ns)
            with self._lock:
                cached = self._entries.get(path)
                if cached is not None and cached[0] == version:
                    self._entries.move_to_end(path)
                    return cached[1]
            data = base64.b64encode(path.read_bytes()).decode("ascii")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            with self._lock:
                self._forget(path)
            return None
        except OSError as e:
            log.warning("media_image_unreadable", path=relative, error=str(e))
            return None
        with self._lock:
            self._remember(path, version, data)
        return data

    def _remember(self, path: Path, version: _Version, data: str) -> None:
        self._forget(path)
        if len(data) > self.max_chars:
            return
        self._entries[path] = (version, data)
        self._chars += len(data)
        while self._chars > self.max_chars:
            _, (_, old) = self._entries.popitem(last=False)
            self._chars -= len(old)

    def _forget(self, path: Path) -> None:
        old = self._entries.pop(path, None)
        if old is not None:
            self._chars -= len(old[1])
