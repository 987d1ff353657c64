"""`FileSessionStore`: the `SessionStore` of design §4's files (JSONL history, archive, `.meta.json`), blocking
work in worker threads; appends group-committed across sessions (`HistoryWriter`), one thread hop per batch."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import structlog

from agenthub.errors import StorageError
from agenthub.session_keys import SessionKey, key_from_file_stem
from agenthub.storage import jsonl
from agenthub.storage.history_writer import HistoryWriter
from agenthub.storage.meta import SessionMeta, read_meta, write_meta
from agenthub.storage.paths import AgentLayout, check_plain_name
from agenthub.storage.store import HistoryRecord, SessionActivity, check_records, newest_timestamp

log = structlog.get_logger(__name__)

T = TypeVar("T")


class FileSessionStore:
    """Session histories as JSONL files under `data_dir` (design §4): whole-line appends that land all or nothing,
    a torn tail skipped on read and cut by the next append, archive-then-replace, and every path refused if it is
    a symbolic link (files are opened with O_NOFOLLOW). A write the disk refuses raises StorageError; a read of a
    broken layout (a directory where a file belongs) raises its OSError, as it did before the store existed (the
    turn reports it as an internal error, not as a full disk)."""

    def __init__(self, data_dir: Path, *, fsync: bool = True) -> None:
        self.data_dir = data_dir
        self.fsync = fsync
        self._layouts: dict[str, AgentLayout] = {}
        self.writer = HistoryWriter(data_dir, fsync=fsync)

    def layout(self, agent: str) -> AgentLayout:
        """The agent's directory layout: for the files-only code (search, forget, media) that reads the files."""
        if agent not in self._layouts:
            self._layouts[agent] = AgentLayout(self.data_dir, agent)
        return self._layouts[agent]

    async def load(self, key: SessionKey) -> list[HistoryRecord]:
        await self._ready()
        path = self.layout(key.agent).history_file(key)
        return await asyncio.to_thread(jsonl.read_records, path)

    async def append(self, key: SessionKey, records: Sequence[HistoryRecord]) -> None:
        """Durable (with `fsync`) when it returns: the lines share their batch's one log write and fdatasync with
        every other session's appends waiting at that moment (`HistoryWriter`); a link planted at the history
        file, the meta beside it or a directory above refuses the append before anything is written."""
        check_records(records)
        self.layout(key.agent)._check_owner(key)
        payload = jsonl.encode_lines(records)
        if not payload:
            return
        try:
            await self.writer.append(key.agent, _plain_stem(key), payload)
        except OSError as e:
            raise StorageError("could not append to the session's history") from e

    async def recover(self) -> None:
        """Replay the commit log a crash left into the history files (once per store; at start)."""
        await self._ready()

    async def _ready(self) -> None:
        try:
            await self.writer.ready()
        except OSError as e:
            raise StorageError("could not recover the history commit log") from e

    async def aclose(self) -> None:
        """Checkpoint the commit log and close the open files (a clean stop)."""
        try:
            await self.writer.aclose()
        except OSError:
            log.exception("history_writer_close_failed")

    async def replace(
        self, key: SessionKey, records: Sequence[HistoryRecord], *, archive: Sequence[HistoryRecord]
    ) -> None:
        check_records(records)
        layout = self.layout(key.agent)

        def write() -> None:
            with self._archived(layout, key, archive):
                jsonl.replace_records(layout.history_file(key), records, fsync=self.fsync)

        await self._exclusive(key, "replace the history", write)

    async def clear(self, key: SessionKey, *, archive: Sequence[HistoryRecord]) -> None:
        layout = self.layout(key.agent)

        def write() -> None:
            with self._archived(layout, key, archive):
                jsonl.delete_file(layout.history_file(key))

        await self._exclusive(key, "clear the history", write)

    @contextmanager
    def _archived(self, layout: AgentLayout, key: SessionKey, records: Sequence[HistoryRecord]) -> Iterator[None]:
        """Append `records` to the archive for the block's step; a step that fails (the disk refuses the new
        history) takes them back, so the archive never holds what the working history still holds. A crash in
        between can still leave them in both: never lost, at worst archived twice."""
        if not records:
            yield
            return
        path = layout.archive_file(key)
        offset = jsonl.append_records(path, records, fsync=self.fsync)
        try:
            yield
        except BaseException:
            jsonl.take_back(path, offset, fsync=self.fsync)
            raise

    async def read_archive(self, key: SessionKey) -> list[HistoryRecord]:
        path = self.layout(key.agent).archive_file(key)
        return await asyncio.to_thread(jsonl.read_records, path)

    async def rewrite_archive(self, key: SessionKey, records: Sequence[HistoryRecord]) -> None:
        path = self.layout(key.agent).archive_file(key)
        await _on_disk("rewrite the archive", lambda: jsonl.replace_records(path, records, fsync=self.fsync))

    async def delete(self, key: SessionKey) -> bool:
        layout = self.layout(key.agent)

        def remove() -> bool:
            paths = (layout.history_file(key), layout.archive_file(key), layout.meta_file(key))  # the meta last
            return any([jsonl.delete_file(p) for p in paths])

        return await self._exclusive(key, "delete the session's files", remove)

    async def _exclusive(self, key: SessionKey, what: str, operation: Callable[[], T]) -> T:
        """A whole-file operation on `key`'s history, between the writer's batches after its checkpoint."""
        try:
            return await self.writer.exclusive(key.agent, _plain_stem(key), operation)
        except OSError as e:
            raise StorageError(f"could not {what}") from e

    async def read_meta(self, key: SessionKey) -> SessionMeta | None:
        await self._ready()
        layout = self.layout(key.agent)

        def read() -> SessionMeta | None:
            meta = read_meta(layout.meta_file(key))
            if meta is None:
                return None
            last = jsonl.last_record(layout.history_file(key))
            newest = newest_timestamp([last]) if last is not None else None
            return meta.with_changes(updated_at=newest) if newest is not None and newest > meta.updated_at else meta

        return await asyncio.to_thread(read)

    async def write_meta(self, key: SessionKey, meta: SessionMeta, *, durable: bool) -> None:
        path = self.layout(key.agent).meta_file(key)
        await _on_disk("write the session's meta", lambda: write_meta(path, meta, durable=durable))

    async def exists(self, key: SessionKey) -> bool:
        return await asyncio.to_thread(self.exists_now, key)

    def exists_now(self, key: SessionKey) -> bool:
        """Two stats at most, on the caller's thread (quick enough for the event loop's look-ups)."""
        layout = self.layout(key.agent)
        return layout.history_file(key).exists() or layout.meta_file(key).exists()

    async def list_keys(self, agent: str) -> list[SessionKey]:
        sessions_dir = self.layout(agent).sessions_dir
        stems = await asyncio.to_thread(_session_stems, sessions_dir)
        keys = (key_from_file_stem(stem) for stem in sorted(stems))
        return [key for key in keys if key is not None and key.agent == agent]

    async def keys_with_anything(self, agent: str) -> list[SessionKey]:
        layout = self.layout(agent)
        stems = await asyncio.to_thread(
            lambda: _session_stems(layout.sessions_dir) | _session_stems(layout.archive_dir)
        )
        keys = (key_from_file_stem(stem) for stem in sorted(stems))
        return [key for key in keys if key is not None and key.agent == agent]

    async def activity(self, agent: str) -> list[SessionActivity]:
        sessions_dir = self.layout(agent).sessions_dir
        found = await asyncio.to_thread(_history_mtimes, sessions_dir)
        keyed = [(key_from_file_stem(stem), mtime) for stem, mtime in found]
        activity = [SessionActivity(key, mtime) for key, mtime in keyed if key is not None and key.agent == agent]
        return sorted(activity, key=lambda a: a.changed_at, reverse=True)

    async def fence(self, key: SessionKey, token: int | None) -> bool:
        """One instance writes a data directory (its lock file): nothing to fence, never changed by someone else."""
        return False


async def _on_disk(what: str, operation: Callable[[], T]) -> T:
    """Run a blocking file operation in a worker thread; an OSError there (a full or read-only disk) becomes
    StorageError, so callers see one error type for "could not store"."""
    try:
        return await asyncio.to_thread(operation)
    except OSError as e:
        raise StorageError(f"could not {what}") from e


def _plain_stem(key: SessionKey) -> str:
    """The key's file stem, refused unless it is a plain name (defence in depth after the key factory)."""
    check_plain_name(key.file_stem)
    return key.file_stem


def _session_stems(sessions_dir: Path) -> set[str]:
    if not sessions_dir.is_dir():
        return set()
    stems = set()
    for path in sessions_dir.iterdir():
        name = path.name
        if name.endswith(".meta.json"):
            stems.add(name[: -len(".meta.json")])
        elif name.endswith(".jsonl"):
            stems.add(name[: -len(".jsonl")])
    return stems


def _history_mtimes(sessions_dir: Path) -> list[tuple[str, float]]:
    """(stem, mtime) of every `*.jsonl` history in `sessions_dir`. Runs in a worker thread."""
    if not sessions_dir.is_dir():
        return []
    found = []
    for path in sessions_dir.iterdir():
        if path.name.endswith(".jsonl") and path.is_file():
            try:
                found.append((path.name[: -len(".jsonl")], path.stat().st_mtime))
            except FileNotFoundError:
                continue
    return found
