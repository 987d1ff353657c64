"""A real full disk for storage tests: a small tmpfs mounted over a directory, filled until ENOSPC."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PAGE = 4096


@contextmanager
def small_tmpfs(mount_point: Path, size: str = "256k") -> Iterator[Path]:
    """`mount_point` as a fresh tmpfs of `size` (the tests run as root, and mount(8) works here)."""
    mount_point.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mount_point)], check=True)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def fill(disk: Path) -> Path:
    """Take every free page of `disk`; returns the filler, whose removal frees them again."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        while True:
            try:
                if os.write(fd, b"\0" * PAGE) < PAGE:
                    break
            except OSError as e:
                assert e.errno == errno.ENOSPC
                break
    finally:
        os.close(fd)
    assert os.statvfs(disk).f_bfree == 0
    return filler


def room_in_last_page(path: Path) -> int:
    return -path.stat().st_size % PAGE
