"""JSONL storage: whole-line appends, tolerant reads, atomic replace, delete."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agenthub.errors import StorageError
from agenthub.session_keys import session_key
from agenthub.storage import jsonl
from agenthub.storage.atomic import atomic_write_bytes
from agenthub.storage.paths import AgentLayout


def test_append_read_round_trip_with_unicode_and_blocks(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "s.jsonl"  # parent directories are created
    records = [
        {"role": "user", "content": "你好\n第二行", "timestamp": 1},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "x", "input": {}}], "timestamp": 2},
    ]
    jsonl.append_records(path, records[:1])
    jsonl.append_records(path, records[1:])
    assert jsonl.read_records(path) == records
    assert path.read_bytes().count(b"\n") == 2  # an embedded newline is escaped, one record per line
    assert "你好" in path.read_text(encoding="utf-8")
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_read_of_a_missing_file_is_empty(tmp_path: Path) -> None:
    assert jsonl.read_records(tmp_path / "none.jsonl") == []


def test_corrupt_middle_line_is_skipped_and_reported(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"n": 1}\n{not json\n[1, 2]\n\n{"n": 2}\n')
    with capture_logs() as logs:
        assert jsonl.read_records(path) == [{"n": 1}, {"n": 2}]
    events = [(e["event"], e.get("line")) for e in logs]
    assert ("history_line_corrupt", 2) in events
    assert ("history_line_not_object", 3) in events


def test_torn_tail_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"n": 1}\n{"n": 2')
    with capture_logs() as logs:
        assert jsonl.read_records(path) == [{"n": 1}]
    assert [e["event"] for e in logs] == ["history_torn_tail_skipped"]


def test_repair_finds_the_last_newline_beyond_one_chunk(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"n": 1}\n' + b"x" * (3 * 64 * 1024 + 5))  # a torn tail longer than the read chunk
    with capture_logs() as logs:
        jsonl.append_records(path, [{"n": 2}])
    assert path.read_bytes() == b'{"n": 1}\n{"n": 2}\n'
    assert logs[0]["event"] == "history_torn_tail_repaired"


def test_empty_append_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    jsonl.append_records(path, [])
    assert not path.exists()


def test_replace_is_atomic_and_leaves_no_temp_file(tmp_path: Path) -> None:
    tmp_path = tmp_path / "d"
    path = tmp_path / "s.jsonl"
    jsonl.append_records(path, [{"n": i} for i in range(5)])
    jsonl.replace_records(path, [{"n": 9}])
    assert jsonl.read_records(path) == [{"n": 9}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.jsonl"]


def test_failed_atomic_write_keeps_the_old_content(tmp_path: Path) -> None:
    tmp_path = tmp_path / "d"
    path = tmp_path / "s.jsonl"
    jsonl.append_records(path, [{"n": 1}])

    class Unencodable:
        pass

    with pytest.raises(TypeError):
        jsonl.replace_records(path, [{"n": 2}, {"bad": Unencodable()}])
    assert jsonl.read_records(path) == [{"n": 1}]
    with pytest.raises(IsADirectoryError):
        atomic_write_bytes(tmp_path, b"x")  # os.replace onto a directory fails: the temp file is removed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.jsonl"]


def test_delete(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    jsonl.append_records(path, [{"n": 1}])
    assert jsonl.delete_file(path) is True
    assert jsonl.delete_file(path) is False


def test_layout_paths(tmp_path: Path) -> None:
    layout = AgentLayout(tmp_path, "reviewer")
    base = tmp_path.resolve() / "reviewer"
    assert layout.sessions_dir == base / "sessions"
    assert layout.archive_dir == base / "sessions" / "archive"
    assert layout.memory_file == base / "memory" / "MEMORY.md"
    with pytest.raises(StorageError):
        AgentLayout(tmp_path, "a").archive_file(session_key("b", "c", "d"))
