"""Atomic whole-file writes: many writers of one file in one process, and the start-up sweep of stale temp files."""

from __future__ import annotations

import threading
from pathlib import Path

from agenthub.storage.atomic import atomic_write_bytes

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
