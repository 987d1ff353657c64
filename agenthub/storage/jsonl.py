"""JSONL files of history records: whole-line appends, tolerant reads, atomic replace."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import structlog

from agenthub import jsonsafe
from agenthub.errors import PathRefusedError
from agenthub.storage.atomic import atomic_write_bytes, fsync_dir

log = structlog.get_logger(__name__)

Record = dict[str, Any]
_TAIL_CHUNK = 64 * 1024


def encode_lines(records: Iterable[Record]) -> bytes:
    return b"".join(_line(r) for r in records)


def _line(record: Record) -> bytes:
    """One UTF-8 line; a record holding a lone surrogate (not UTF-8: user input may hold one) is written with
    ASCII escapes instead (`\\ud8xx`), as PostgreSQL keeps it."""
    text = json.dumps(record, ensure_ascii=False)
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(record).encode("ascii") + b"\n"


@contextmanager
def opened_no_follow(path: Path, flags: int, mode: int = 0o600) -> Iterator[int]:
    """An fd for `path` opened with O_NOFOLLOW: a symbolic link in its place is refused (PathRefusedError), never
    followed, however recently it was planted."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PathRefusedError("refused a symbolic link inside the data directory") from e
        raise
    try:
        yield fd
    finally:
        os.close(fd)


def read_bytes_no_follow(path: Path) -> bytes:
    with opened_no_follow(path, os.O_RDONLY) as fd:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)


def read_records(path: Path) -> list[Record]:
    """Every whole, valid record; a torn or corrupt line is skipped and logged, never fatal."""
    try:
        data = read_bytes_no_follow(path)
    except FileNotFoundError:
        return []
    records: list[Record] = []
    lines = data.split(b"\n")
    torn_tail = lines.pop()  # b"" when the file ends with a newline
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = jsonsafe.loads(line)
        except ValueError:
            log.warning("history_line_corrupt", path=str(path), line=number)
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            log.warning("history_line_not_object", path=str(path), line=number)
    if torn_tail:
        log.warning("history_torn_tail_skipped", path=str(path), bytes=len(torn_tail))
    return records


def append_records(path: Path, records: Iterable[Record], *, fsync: bool = True) -> int:
    """Append whole lines with a single write; first cut a torn tail left by a crash back to the last newline.
    Returns the offset where the appended lines start (`take_back` undoes them).

    All or nothing: a failed or short write (a full disk) or a failed fsync cuts the file back to its size
    before the call and raises OSError, so no partial line and no unconfirmed record stays behind.
    """
    payload = encode_lines(records)
    if not payload:
        return path.stat().st_size if path.exists() else 0
    new_file = not path.exists()
    if new_file:
        path.parent.mkdir(parents=True, exist_ok=True)
    with opened_no_follow(path, os.O_RDWR | os.O_APPEND | os.O_CREAT) as fd:
        repair_torn_tail(fd, path)
        size = os.fstat(fd).st_size
        try:
            written = os.write(fd, payload)
            if written != len(payload):  # a short write on a regular file means the disk is full
                raise OSError(errno.ENOSPC, f"short write: {written} of {len(payload)} bytes", str(path))
            if fsync:
                os.fsync(fd)
                if new_file:
                    fsync_dir(path.parent)
        except BaseException:
            _cut_back(fd, path, size)
            raise
    return size


def take_back(path: Path, offset: int, *, fsync: bool = True) -> None:
    """Undo an append that landed at `offset` (the step after it failed): cut the file back there, durably."""
    with opened_no_follow(path, os.O_RDWR) as fd:
        _cut_back(fd, path, offset)
        if fsync:
            os.fsync(fd)


def _cut_back(fd: int, path: Path, size: int) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError:  # the torn line left behind is skipped on load and cut by the next append
        log.exception("history_cut_back_failed", path=str(path), size=size)
    else:
        log.warning("history_append_undone", path=str(path), size=size)


def repair_torn_tail(fd: int, path: Path) -> None:
    """Cut a torn last line (no newline: a crash mid-append) back to the last newline."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    start = max(0, size - _TAIL_CHUNK)
    while True:
        chunk = os.pread(fd, size - start, start)
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            keep = start + cut + 1
            break
        if start == 0:
            keep = 0
            break
        start = max(0, start - _TAIL_CHUNK)
    os.ftruncate(fd, keep)
    log.warning("history_torn_tail_repaired", path=str(path), removed_bytes=size - keep)


def replace_records(path: Path, records: Iterable[Record], *, fsync: bool = True) -> None:
    """Atomically replace the whole file."""
    atomic_write_bytes(path, encode_lines(records), durable=fsync)


def delete_file(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def last_record(path: Path) -> Record | None:
    """The last whole, valid record of the file, read from its tail (a growing window, so a long history costs one
    small read): what a meta written behind is caught up from after a crash."""
    try:
        with opened_no_follow(path, os.O_RDONLY) as fd:
            size, window = os.fstat(fd).st_size, _TAIL_CHUNK
            while True:
                start = max(0, size - window)
                lines = os.pread(fd, size - start, start).split(b"\n")[:-1]  # after the last newline: a torn tail
                if start > 0:
                    lines = lines[1:]  # the window may begin inside a line
                record = next((r for r in map(parse_line, reversed(lines)) if r is not None), None)
                if record is not None or start == 0:
                    return record
                window *= 2
    except FileNotFoundError:
        return None


def parse_line(line: bytes) -> Record | None:
    """One JSONL line's record; None for a blank, damaged or non-object line."""
    if not line.strip():
        return None
    try:
        record = jsonsafe.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None
