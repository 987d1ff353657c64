"""What the history writer hands its followers after an append landed: the lines as written, where they went and
the file's identity before and after, so the files search feed indexes them without opening and reading the file
again (`FileFeeder.sync_session`'s `handed`); a follower that cannot use one falls back to reading the file."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

HEAD_BYTES = 4096
"""The head of a history file whose digest a search watermark keeps (`search_files_feed`)."""
TAIL_BYTES = 64
"""The last bytes before a watermark's offset that it keeps."""

Stat = tuple[int, int, int]
"""A file's (inode, size, mtime_ns)."""


@dataclass(frozen=True)
class Appended:
    """Whole JSONL lines (`payload`) written at `start` of `data/<agent>/sessions/<stem>.jsonl` by this process's
    writer. `before`: the file's stat just before the write (after any torn tail was cut), `after`: just after it;
    `head`: the file's first `HEAD_BYTES` up to the new end when the lines start inside them (else None); `tail`:
    the file's last `TAIL_BYTES` up to the new end."""

    agent: str
    stem: str
    payload: bytes
    start: int
    before: Stat
    after: Stat
    head: bytes | None
    tail: bytes

    @property
    def end(self) -> int:
        return self.start + len(self.payload)


AppendedHook = Callable[[Appended], None]
"""Called on the event loop, in write order, after a batch landed (before its appends are acknowledged)."""


def stat_of(fd: int) -> Stat:
    st = os.fstat(fd)
    return st.st_ino, st.st_size, st.st_mtime_ns


def appended(agent: str, stem: str, fd: int, payload: bytes, before: Stat) -> Appended:
    """The hand-over of `payload` just written at the end of `fd` (whose stat was `before`): one fstat, and a
    `pread` only for a file still under `HEAD_BYTES` or lines shorter than `TAIL_BYTES`."""
    start = before[1]
    end = start + len(payload)
    if start == 0:
        head: bytes | None = payload[:HEAD_BYTES]
    elif start < HEAD_BYTES:
        head = os.pread(fd, min(HEAD_BYTES, end), 0)
    else:
        head = None
    if len(payload) >= TAIL_BYTES:
        tail = payload[-TAIL_BYTES:]
    else:
        tail = os.pread(fd, min(TAIL_BYTES, end), end - min(TAIL_BYTES, end))
    return Appended(agent, stem, payload, start, before, stat_of(fd), head, tail)
