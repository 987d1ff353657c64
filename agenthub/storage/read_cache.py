"""`ReadCache`: the texts of small files read on every turn (memory, profiles), kept while a stat shows them
unchanged, so that an unchanged file costs one stat on the event loop rather than a thread hop and a read."""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Hashable
from pathlib import Path

Version = tuple[int, int, int, int] | None
"""(inode, size, mtime ns, ctime ns) of a file, None when it does not exist."""

KEPT = 4096
"""How many files the cache holds (the least recently read go first)."""


def version_of(stat: os.stat_result) -> Version:
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def read_versioned(path: Path) -> tuple[str, Version]:
    """The file's text ("" when missing) and the version it was read at, taken before the read (a change during
    it shows as a newer version at the next look, never as an old text kept for a new version)."""
    try:
        with path.open(encoding="utf-8") as f:
            version = version_of(os.fstat(f.fileno()))
            return f.read(), version
    except FileNotFoundError:
        return "", None


class ReadCache:
    """Texts by key with the path and version they were read at. `get` checks the version with one `os.stat`
    (not following a link: a path that became one reads from disk again, where its checks are made); a writer of
    the file drops its key (an atomic replace changes the inode anyway, an edit in place mtime and ctime)."""

    def __init__(self, kept: int = KEPT) -> None:
        self._kept = kept
        self._texts: OrderedDict[Hashable, tuple[str, Version, str]] = OrderedDict()
        self.drops = 0
        """How many drops so far: a read that began before a drop keeps nothing (`keep(..., since=)`), so a text
        read before a write is never kept for a later version that a coarse clock and a reused inode make look
        alike."""

    def get(self, key: Hashable) -> str | None:
        """The kept text while its file is as it was read, else None (read it again)."""
        hit = self._texts.get(key)
        if hit is None:
            return None
        path, version, text = hit
        try:
            now = version_of(os.stat(path, follow_symlinks=False))
        except FileNotFoundError:
            now = None
        except OSError:
            return None
        if now != version:
            del self._texts[key]
            return None
        self._texts.move_to_end(key)
        return text

    def keep(self, key: Hashable, path: str, version: Version, text: str, *, since: int | None = None) -> None:
        """Keep `text` read at `version`; `since`: `drops` when the read began (nothing kept if a drop came since)."""
        if since is not None and since != self.drops:
            return
        self._texts[key] = (path, version, text)
        self._texts.move_to_end(key)
        while len(self._texts) > self._kept:
            self._texts.popitem(last=False)

    def drop(self, key: Hashable) -> None:
        self.drops += 1
        self._texts.pop(key, None)
