"""Atomic whole-file writes: many writers of one file in one process, and the start-up sweep of stale temp files."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from agenthub.storage.atomic import atomic_write_bytes, remove_stale_temp_files

WRITERS = 8
WRITES_EACH = 40


def _payload(writer: int, n: int) -> bytes:
    return f"writer {writer} write {n}\n".encode() + bytes([65 + writer]) * 200_000


def test_concurrent_writers_of_one_file_in_one_process_never_mix_or_fail(tmp_path: Path) -> None:
    path = tmp_path / "memory" / "MEMORY.md"
    start = threading.Barrier(WRITERS)
    errors: list[BaseException] = []

    def write_many(writer: int) -> None:
        start.wait()
        for n in range(WRITES_EACH):
            try:
                atomic_write_bytes(path, _payload(writer, n), durable=False)
            except BaseException as e:  # collected: the assertion below names them
                errors.append(e)

    threads = [threading.Thread(target=write_many, args=(w,)) for w in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    final = path.read_bytes()
    assert final in {_payload(w, WRITES_EACH - 1) for w in range(WRITERS)}  # one writer's last version, whole
    assert [p.name for p in path.parent.iterdir()] == ["MEMORY.md"]  # no temp file left behind


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_sweep_removes_only_temp_files_whose_writer_is_gone(tmp_path: Path) -> None:
    data, auth = tmp_path / "data", tmp_path / "auth"
    (data / "default" / "memory").mkdir(parents=True)
    auth.mkdir()
    dead, alive = _dead_pid(), os.getppid()
    stale = [
        data / "default" / "memory" / f".MEMORY.md.{dead}.tmp",  # the old naming
        data / "default" / "memory" / f".MEMORY.md.{dead}.9f3a1c0b22d4.tmp",
        auth / f".USER.md.{os.getpid()}.00aa11bb22cc.tmp",  # our own pid: a predecessor's, nothing written yet
    ]
    kept = [
        auth / f".tokens.json.{alive}.00aa11bb22cc.tmp",  # a running process is writing it
        auth / "notes.tmp",
        auth / ".notes.tmp",
        data / "default" / "memory" / "MEMORY.md",
    ]
    for path in stale + kept:
        path.write_text("x", encoding="utf-8")
    assert remove_stale_temp_files([data, auth, tmp_path / "missing"]) == len(stale)
    assert not any(p.exists() for p in stale) and all(p.exists() for p in kept)


def test_a_live_writers_temp_file_whose_random_part_is_all_digits_is_kept(tmp_path: Path) -> None:
    """`.<name>.<pid>.<random>.tmp` with a random part of digits only (about 1 write in 300) names the live pid,
    not the random number: the sweep must not take the random part for a dead writer's pid and remove the file a
    running process is about to rename into place."""
    alive = os.getppid()
    in_flight = tmp_path / f".MEMORY.md.{alive}.752865051515.tmp"
    dead_with_digits = tmp_path / f".USER.md.{_dead_pid()}.123456789012.tmp"
    in_flight.write_text("x", encoding="utf-8")
    dead_with_digits.write_text("x", encoding="utf-8")
    assert remove_stale_temp_files([tmp_path]) == 1
    assert in_flight.exists() and not dead_with_digits.exists()
