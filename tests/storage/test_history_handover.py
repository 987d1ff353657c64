"""The history writer's hand-over: what an append wrote, where, and the file's stat around it, exactly as on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from agenthub.errors import StorageError
from agenthub.session_keys import SessionKey
from agenthub.storage import jsonl
from agenthub.storage.commit_log import LOG_FILE
from agenthub.storage.files import FileSessionStore
from agenthub.storage.history_handover import HEAD_BYTES, TAIL_BYTES, Appended


def _stat(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return st.st_ino, st.st_size, st.st_mtime_ns


async def test_each_landed_append_is_handed_over_as_it_is_on_disk(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path / "data", fsync=True)
    handed: list[Appended] = []
    store.writer.followers.append(handed.append)
    key = SessionKey("default", "http", "chat")
    path = store.layout("default").history_file(key)
    texts = ["hi", "x" * 3000, "ok", "y" * 2000, "z"]  # short lines (tail read back), the 4 KB head crossed
    try:
        for text in texts:
            await store.append(key, [{"role": "user", "content": text}])
            item = handed[-1]
            data = path.read_bytes()
            assert (item.agent, item.stem) == ("default", key.file_stem)
            assert (
                data[item.start : item.end] == item.payload == jsonl.encode_lines([{"role": "user", "content": text}])
            )
            assert item.end == len(data) and item.after == _stat(path)
            assert item.before[:2] == (item.after[0], item.start)
            assert item.tail == data[max(0, item.end - TAIL_BYTES) : item.end]
            assert item.head == (data[: min(HEAD_BYTES, item.end)] if item.start < HEAD_BYTES else None)
        assert [h.before[1] for h in handed[1:]] == [h.end for h in handed[:-1]]  # a chain, in write order
    finally:
        await store.aclose()


async def test_an_append_the_log_refused_is_not_handed_over(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, fsync=True)
    handed: list[Appended] = []
    store.writer.followers.append(handed.append)
    key = SessionKey("default", "http", "chat")
    await store.append(key, [{"role": "user", "content": "kept"}])
    await store.aclose()
    (tmp_path / LOG_FILE).unlink()
    (tmp_path / LOG_FILE).symlink_to(tmp_path / "elsewhere.log")  # the log refuses: the batch is taken back
    with pytest.raises(StorageError):
        await store.append(key, [{"role": "user", "content": "refused"}])
    assert [h.payload for h in handed] == [jsonl.encode_lines([{"role": "user", "content": "kept"}])]
