"""SessionHistory: the write-through, lazily loaded cache of every session's JSONL history and meta."""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import structlog

from agenthub.aio import runs_to_end
from agenthub.errors import StorageError
from agenthub.storage import jsonl
from agenthub.storage.keys import SessionKey, key_from_file_stem
from agenthub.storage.meta import (
    DEFAULT_TITLE,
    SessionMeta,
    read_meta,
    synthesise_meta,
    text_of,
    title_from,
    write_meta,
)
from agenthub.storage.paths import AgentLayout
from agenthub.storage.store import SessionActivity

log = structlog.get_logger(__name__)

Message = dict[str, Any]
T = TypeVar("T")
HistoryObserver = Callable[[str, SessionKey], None]  # (op: append|replace|clear|delete, key), after the write landed


def _now_ms(clock: Callable[[], float]) -> int:
    return int(clock() * 1000)


@dataclass
class _Entry:
    messages: list[Message] | None = None  # None until first load
    meta: SessionMeta | None = None
    meta_loaded: bool = False
    meta_dirty: bool = False  # the cached meta is newer than its file (a write failed); the next write retries


class SessionHistory:
    """Owns every read and write of history files; one instance per data directory.

    Nothing is loaded at start; the first access of a session reads its file, later reads come from the
    cache, and every write goes to disk before the call returns (in a worker thread, so the event loop
    never blocks). Operations on one session are serialised by a per-session lock.
    """

    def __init__(self, data_dir: Path, *, fsync: bool = True, clock: Callable[[], float] = time.time) -> None:
        self.data_dir = data_dir
        self._fsync = fsync
        self._clock = clock
        self._entries: dict[SessionKey, _Entry] = {}
        self._locks: dict[SessionKey, asyncio.Lock] = {}
        self._users: dict[SessionKey, int] = {}  # tasks holding or waiting for each session's lock
        self._layouts: dict[str, AgentLayout] = {}
        self.observers: list[HistoryObserver] = []

    def layout(self, agent: str) -> AgentLayout:
        if agent not in self._layouts:
            self._layouts[agent] = AgentLayout(self.data_dir, agent)
        return self._layouts[agent]

    @asynccontextmanager
    async def _locked(self, key: SessionKey) -> AsyncIterator[None]:
        """Serialise operations on one session; the lock is counted so `evict` never drops one in use."""
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        self._users[key] = self._users.get(key, 0) + 1
        try:
            async with lock:
                yield
        finally:
            left = self._users[key] - 1
            if left:
                self._users[key] = left
            else:
                del self._users[key]

    def _notify(self, op: str, key: SessionKey) -> None:
        for observer in self.observers:
            try:
                observer(op, key)
            except Exception:  # an observer (the search index) must never fail a write that already landed
                log.exception("history_observer_failed", op=op)

    def _entry(self, key: SessionKey) -> _Entry:
        return self._entries.setdefault(key, _Entry())

    async def _messages(self, key: SessionKey) -> list[Message]:
        entry = self._entry(key)
        if entry.messages is None:
            path = self.layout(key.agent).history_file(key)
            entry.messages = await asyncio.to_thread(jsonl.read_records, path)
        return entry.messages

    # ---- history -------------------------------------------------------------------------------

    async def load(self, key: SessionKey) -> list[Message]:
        """A copy of the working history (oldest first)."""
        async with self._locked(key):
            return list(await self._messages(key))

    async def count(self, key: SessionKey) -> int:
        async with self._locked(key):
            return len(await self._messages(key))

    @runs_to_end
    async def append(self, key: SessionKey, *messages: Message, meta_changes: dict[str, Any] | None = None) -> None:
        """Persist `messages` (a `timestamp` is added where missing), then update the cache and meta.

        The JSONL append is the commit point: it lands whole or not at all (StorageError, file and cache
        unchanged, so a retry cannot duplicate). A meta write failing after it does not fail the append: the
        meta is derivable, so it is logged, kept in the cache as dirty and written by the session's next write.
        `meta_changes` (e.g. the turn's `last_usage`) ride along in the same meta write.
        """
        now = _now_ms(self._clock)
        stamped = [m if "timestamp" in m else {**m, "timestamp": now} for m in messages]
        async with self._locked(key):
            cached = await self._messages(key)
            meta = await self._touched_meta(key, cached, stamped, now)
            if meta_changes:
                meta = meta.with_changes(**meta_changes)
            layout = self.layout(key.agent)

            def write() -> bool:  # one worker-thread hop for both files; both paths are checked before the append
                history_file, meta_file = layout.history_file(key), layout.meta_file(key)
                jsonl.append_records(history_file, stamped, fsync=self._fsync)
                return _meta_saved(key, meta_file, meta, durable=False)

            meta_saved = await _on_disk("append to the session's history", write)
            cached.extend(stamped)
            entry = self._entry(key)
            entry.meta, entry.meta_loaded, entry.meta_dirty = meta, True, not meta_saved
            self._notify("append", key)

    @runs_to_end
    async def clear(self, key: SessionKey) -> list[Message]:
        """Remove the working history (the meta stays, design §3) after appending it to the archive, so what
        was said is never lost; a crash in between at worst leaves it in both. Returns the archived messages."""
        async with self._locked(key):
            layout = self.layout(key.agent)
            cleared = list(await self._messages(key))
            if cleared:
                archive = layout.archive_file(key)
                await _on_disk("archive", lambda: jsonl.append_records(archive, cleared, fsync=self._fsync))
            await _on_disk("delete the history", functools.partial(jsonl.delete_file, layout.history_file(key)))
            self._entry(key).messages = []
            self._notify("clear", key)
            return cleared

    @runs_to_end
    async def replace(self, key: SessionKey, messages: list[Message], *, archive_removed: bool = True) -> list[Message]:
        """Make `messages` the working history; everything dropped is appended to the archive first.

        Returns the archived messages. Archive-then-replace means a crash in between at worst
        duplicates messages in the archive, never loses one. A redaction ("forget me") passes
        `archive_removed=False`: what it replaces must not survive in the archive.
        """
        async with self._locked(key):
            old = await self._messages(key)
            removed = _removed(old, messages) if archive_removed else []
            layout = self.layout(key.agent)
            if removed:
                archive = layout.archive_file(key)
                await _on_disk("archive", lambda: jsonl.append_records(archive, removed, fsync=self._fsync))
            path = layout.history_file(key)
            await _on_disk("replace the history", lambda: jsonl.replace_records(path, messages, fsync=self._fsync))
            self._entry(key).messages = list(messages)
            self._notify("replace", key)
            return removed

    async def archived(self, key: SessionKey) -> list[Message]:
        path = self.layout(key.agent).archive_file(key)
        return await asyncio.to_thread(jsonl.read_records, path)

    @runs_to_end
    async def rewrite_archive(self, key: SessionKey, change: Callable[[list[Message]], list[Message]]) -> bool:
        """Under the session's lock: replace the archive with `change(archived records)`, atomically (a redaction);
        an unchanged list leaves the file alone. True when the file was rewritten."""
        async with self._locked(key):
            path = self.layout(key.agent).archive_file(key)
            old = await asyncio.to_thread(jsonl.read_records, path)
            new = change(old)
            if new == old:
                return False
            await _on_disk("rewrite the archive", lambda: jsonl.replace_records(path, new, fsync=self._fsync))
            return True

    @runs_to_end
    async def delete(self, key: SessionKey, *, also: Iterable[Path] = ()) -> bool:
        """Delete everything stored of the session: history, archive, the files in `also` (the caller's, e.g. the
        chat's own memory file) and, last, the meta, so a delete cut short still lists the session and can be
        repeated. Links are removed, never followed. True if anything existed."""
        async with self._locked(key):
            layout = self.layout(key.agent)
            paths = [layout.history_file(key), layout.archive_file(key), *also, layout.meta_file(key)]
            try:
                gone = await _on_disk("delete the session's files", lambda: [jsonl.delete_file(p) for p in paths])
            finally:
                self._entries.pop(key, None)
            self._notify("delete", key)
            return any(gone)

    def evict(self, key: SessionKey) -> None:
        """Forget the cached copy (the files are untouched); the next access reloads it. A session whose meta
        could not be written yet stays cached, so its next write still has the newer meta to save."""
        entry = self._entries.get(key)
        if key not in self._users and not (entry is not None and entry.meta_dirty):
            self._entries.pop(key, None)
            self._locks.pop(key, None)

    def exists(self, key: SessionKey) -> bool:
        layout = self.layout(key.agent)
        return layout.history_file(key).exists() or layout.meta_file(key).exists()

    # ---- meta ----------------------------------------------------------------------------------

    async def _meta(self, key: SessionKey) -> SessionMeta | None:
        entry = self._entry(key)
        if not entry.meta_loaded:
            entry.meta = await asyncio.to_thread(read_meta, self.layout(key.agent).meta_file(key))
            entry.meta_loaded = True
        return entry.meta

    async def _store_meta(self, key: SessionKey, meta: SessionMeta, *, durable: bool) -> None:
        """Write the meta, then cache it; StorageError (cache unchanged) when it cannot be written."""
        layout = self.layout(key.agent)
        await _on_disk("write the session's meta", lambda: write_meta(layout.meta_file(key), meta, durable=durable))
        entry = self._entry(key)
        entry.meta, entry.meta_loaded, entry.meta_dirty = meta, True, False

    async def _store_derived_meta(self, key: SessionKey, meta: SessionMeta) -> None:
        """Save a meta derived from the history (a legacy session's); if that fails it is served from the cache
        and saved by the session's next write: listing must work on a full disk too."""
        layout = self.layout(key.agent)
        saved = await asyncio.to_thread(_meta_saved, key, layout.meta_file(key), meta, durable=True)
        entry = self._entry(key)
        entry.meta, entry.meta_loaded, entry.meta_dirty = meta, True, not saved

    async def _touched_meta(self, key: SessionKey, cached: list[Message], new: list[Message], now: int) -> SessionMeta:
        """The meta after appending `new`: `updated_at` moves, and a default title becomes the first user text."""
        meta = await self._meta(key)
        if meta is None:
            meta = synthesise_meta(key.chat_id, [*cached, *new], now)
        changes: dict[str, Any] = {"updated_at": now}
        if meta.title == DEFAULT_TITLE:
            first_user = next((text_of(m["content"]) for m in new if m.get("role") == "user"), "")
            if first_user.strip():
                changes["title"] = title_from(first_user)
        return meta.with_changes(**changes)

    @runs_to_end
    async def get_meta(self, key: SessionKey) -> SessionMeta | None:
        """The stored meta; a legacy session (history but no meta) gets one synthesised and saved."""
        async with self._locked(key):
            meta = await self._meta(key)
            if meta is None:
                if not self.layout(key.agent).history_file(key).exists():
                    self._entries.pop(key, None)  # probing unknown ids must not grow the cache
                    return None
                meta = synthesise_meta(key.chat_id, await self._messages(key), _now_ms(self._clock))
                await self._store_derived_meta(key, meta)
            return meta

    @runs_to_end
    async def create(self, key: SessionKey, title: str = DEFAULT_TITLE) -> SessionMeta:
        """Create (or return) the session's meta without any message."""
        async with self._locked(key):
            meta = await self._meta(key)
            if meta is None:
                now = _now_ms(self._clock)
                meta = SessionMeta(chat_id=key.chat_id, title=title, created_at=now, updated_at=now)
                await self._store_meta(key, meta, durable=True)
            return meta

    @runs_to_end
    async def update_meta(self, key: SessionKey, **changes: Any) -> SessionMeta:
        """Change title / pinned / last_usage; the session must exist (KeyError otherwise)."""
        async with self._locked(key):
            meta = await self._meta(key)
            if meta is None:
                if not self.layout(key.agent).history_file(key).exists():
                    raise KeyError(str(key))
                meta = synthesise_meta(key.chat_id, await self._messages(key), _now_ms(self._clock))
            meta = meta.with_changes(**changes)
            # last_usage alone is a per-turn statistic, recomputed by the next turn: not worth two fsyncs
            await self._store_meta(key, meta, durable=set(changes) != {"last_usage"})
            return meta

    async def activity(self, agent: str) -> list[SessionActivity]:
        """When each of `agent`'s histories last changed, newest first (what AutoCompact and L3 pick by)."""
        sessions_dir = self.layout(agent).sessions_dir
        found = await asyncio.to_thread(_history_mtimes, sessions_dir)
        keyed = [(key_from_file_stem(stem), mtime) for stem, mtime in found]
        activity = [SessionActivity(key, mtime) for key, mtime in keyed if key is not None and key.agent == agent]
        return sorted(activity, key=lambda a: a.changed_at, reverse=True)

    async def list_sessions(self, agent: str, channel: str | None = None) -> list[tuple[SessionKey, SessionMeta]]:
        """Every session of `agent` (optionally one channel) with its meta, legacy ones given meta on the fly."""
        sessions_dir = self.layout(agent).sessions_dir
        stems = await asyncio.to_thread(_session_stems, sessions_dir)
        found: list[tuple[SessionKey, SessionMeta]] = []
        for stem in stems:
            key = key_from_file_stem(stem)
            if key is None or key.agent != agent or (channel is not None and key.channel != channel):
                continue
            try:
                meta = await self.get_meta(key)
            except StorageError:  # one bad entry (a planted link) must not hide every other session
                log.warning("session_entry_refused", agent=agent, file=stem)
                continue
            if meta is not None:
                found.append((key, meta))
        return found


async def _on_disk(what: str, operation: Callable[[], T]) -> T:
    """Run a blocking file operation in a worker thread; an OSError there (a full or read-only disk) becomes
    StorageError, so callers see one error type for "could not store"."""
    try:
        return await asyncio.to_thread(operation)
    except OSError as e:
        raise StorageError(f"could not {what}") from e


def _meta_saved(key: SessionKey, path: Path, meta: SessionMeta, *, durable: bool) -> bool:
    """Write `meta`; False (logged) when the disk refuses it. Runs in a worker thread."""
    try:
        write_meta(path, meta, durable=durable)
    except (OSError, StorageError) as e:
        errno = getattr(e, "errno", None)
        log.warning("session_meta_write_failed", session_key=str(key), error_type=type(e).__name__, errno=errno)
        return False
    return True


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


def _removed(old: list[Message], new: list[Message]) -> list[Message]:
    """The messages of `old` that `new` no longer holds, in their original order (a multiset difference)."""
    remaining = Counter(_fingerprint(m) for m in new)
    removed = []
    for message in old:
        fp = _fingerprint(message)
        if remaining[fp] > 0:
            remaining[fp] -= 1
        else:
            removed.append(message)
    return removed


def _fingerprint(message: Message) -> str:
    return json.dumps(message, sort_keys=True, ensure_ascii=False)
