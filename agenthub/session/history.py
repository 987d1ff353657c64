"""SessionHistory: the lazily loaded cache of every session's history and meta over a `SessionStore`, with the
per-session serialisation, the observers and the meta written behind (its rules: `meta_rules.py`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from agenthub.aio import runs_to_end
from agenthub.errors import StorageError
from agenthub.session.history_diff import removed_messages
from agenthub.session.meta_rules import DERIVED_FIELDS, meta_identity, touched_meta
from agenthub.session_keys import SessionKey
from agenthub.storage import jsonl
from agenthub.storage.files import FileSessionStore
from agenthub.storage.lease import AppendsLettingGo, LetGoRide
from agenthub.storage.meta import DEFAULT_TITLE, SessionMeta, synthesise_meta
from agenthub.storage.paths import AgentLayout
from agenthub.storage.ports import AppendsSettling, QuickLookup, SessionStore
from agenthub.storage.store import FencedWriteError, HistoryRecord, SessionActivity

log = structlog.get_logger(__name__)

Message = HistoryRecord
HistoryObserver = Callable[[str, SessionKey], None]
"""(op, key): `append`, `replace`, `clear` or `delete` after the write landed; `reload` when the cached copy was
dropped because another instance may have changed the session."""
META_DELAY_S = 5.0
"""How long a meta change that is only `updated_at` / `last_usage` waits in the cache before it is written (not
fsynced): a crash loses at most that much, and `read_meta` catches `updated_at` up from the history."""


def _now_ms(clock: Callable[[], float]) -> int:
    return int(clock() * 1000)


@dataclass
class _Entry:
    messages: list[Message] | None = None  # None until first load
    meta: SessionMeta | None = None
    meta_loaded: bool = False
    meta_dirty: bool = False  # the cached meta is newer than the stored one: written behind, or a write failed


class SessionHistory:
    """Every read and write of session histories goes through one instance (per data directory or store).

    Nothing is loaded at start; the first access of a session reads it from the store, later reads come from the
    cache, and every history write reaches the store before the call returns. Operations on one session are
    serialised by a per-session lock. A meta change that only moves `updated_at` or `last_usage` is kept in the
    cache and written behind (after `meta_delay_s`, on `evict` and on `aclose`); title, pin and creation are
    written at once.
    """

    def __init__(
        self,
        data_dir: Path | None = None,
        *,
        fsync: bool = True,
        clock: Callable[[], float] = time.time,
        store: SessionStore | None = None,
        meta_delay_s: float = META_DELAY_S,
    ) -> None:
        self._own_store: FileSessionStore | None = None  # made here: closed by `aclose`
        if store is None:
            if data_dir is None:
                raise ValueError("SessionHistory needs a data directory or a store")
            store = self._own_store = FileSessionStore(data_dir, fsync=fsync)
        self.data_dir = data_dir
        self.store = store
        self._clock = clock
        self._meta_delay_s = meta_delay_s
        self._entries: dict[SessionKey, _Entry] = {}
        self._locks: dict[SessionKey, asyncio.Lock] = {}
        self._users: dict[SessionKey, int] = {}  # tasks holding or waiting for each session's lock
        self._dirty: set[SessionKey] = set()
        self._evict_when_written: set[SessionKey] = set()
        self._flush_timer: asyncio.TimerHandle | None = None
        self._flushes: set[asyncio.Task[None]] = set()
        self.observers: list[HistoryObserver] = []
        self.shared = not isinstance(store, QuickLookup)
        """Several instances write the store (PostgreSQL): a session's cached copy is trusted only while this
        instance holds the session's lease (`lease_held`); otherwise each read goes to the store."""
        self._leased: set[SessionKey] = set()

    def layout(self, agent: str) -> AgentLayout:
        """The agent's file layout, for the files-only code that still reads the files itself (search, forget,
        media, the L3 state file); TypeError over a store that has no files."""
        if not isinstance(self.store, FileSessionStore):
            raise TypeError("layout() needs the files backend")
        return self.store.layout(agent)

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
                if key not in self._entries:  # a probe of an unknown id or a deleted session: nothing to keep
                    self._locks.pop(key, None)

    def _notify(self, op: str, key: SessionKey) -> None:
        for observer in self.observers:
            try:
                observer(op, key)
            except Exception:  # an observer (the search index) must never fail a write that already landed
                log.exception("history_observer_failed", op=op)

    def _entry(self, key: SessionKey) -> _Entry:
        return self._entries.setdefault(key, _Entry())

    def lease_held(self, key: SessionKey, held: bool) -> None:
        """This instance holds (True) or no longer holds (False) the session's lease: only a held session of a
        shared store is answered from the cache; any other read asks the store (another instance may be writing
        it), so any instance serves any route."""
        if held:
            self._leased.add(key)
        else:
            self._leased.discard(key)

    def _trusted(self, key: SessionKey) -> bool:
        return not self.shared or key in self._leased

    async def _messages(self, key: SessionKey) -> list[Message]:
        entry = self._entry(key)
        if entry.messages is None or not self._trusted(key):
            entry.messages = await self.store.load(key)
        return entry.messages

    # ---- history -------------------------------------------------------------------------------

    async def load(self, key: SessionKey) -> list[Message]:
        """A copy of the working history (oldest first)."""
        async with self._locked(key):
            return list(await self._messages(key))

    async def peek(self, key: SessionKey) -> tuple[list[Message], SessionMeta | None]:
        """The working history (the cache's own list: read it, never keep or change it) and, when there is any, the
        stored meta: for a caller that only looks (the budget gate's estimate). Neither a copy nor a task of its
        own, as `load` and `get_meta` make (nothing is written: a legacy session's meta is not synthesised, None)."""
        async with self._locked(key):
            messages = await self._messages(key)
            return messages, (await self._meta(key) if messages else None)

    def peek_now(self, key: SessionKey) -> tuple[list[Message], SessionMeta | None] | None:
        """What `peek` would answer, synchronously, when the cache holds all of it (the history, and its meta when it
        has any: loaded, and trusted) and no task holds or waits for the session's lock; else None (then `peek`).
        No write is ever seen half done (every change of the cache is made in one step, after the store's write),
        and one in flight, or queued, makes this None: `peek` waits for it and answers what it left."""
        entry = self._entries.get(key)
        if entry is None or entry.messages is None or key in self._users or not self._trusted(key):
            return None
        if not entry.messages:
            return entry.messages, None
        return (entry.messages, entry.meta) if entry.meta_loaded else None

    async def count(self, key: SessionKey) -> int:
        async with self._locked(key):
            return len(await self._messages(key))

    @runs_to_end
    async def append(
        self,
        key: SessionKey,
        *messages: Message,
        meta_changes: dict[str, Any] | None = None,
        let_go: LetGoRide | None = None,
        settles: Sequence[str] = (),
    ) -> None:
        """Persist `messages` (a `timestamp` is added where missing), then update the cache and meta.

        The store's append is the commit point and the only durable step: it lands whole or not at all
        (StorageError, store and cache unchanged, so a retry cannot duplicate). The meta follows in the cache: a new
        session or a new title is written at once (not fsynced), a moved `updated_at` or `meta_changes` (e.g. the
        turn's `last_usage`) are written behind. A meta write failing does not fail the append: the meta is
        derivable, so it is logged, kept in the cache as dirty and written later.

        `let_go`: the session's lease, released in the append's statement with the meta (a store that can:
        `AppendsLettingGo`); settled once, whatever happens. `settles`: the inbox entries `messages` answer by being
        stored, settled in the append's statement (a store that can: `AppendsSettling`; else their settles follow
        as usual).
        """
        now = _now_ms(self._clock)
        stamped = [m if "timestamp" in m else {**m, "timestamp": now} for m in messages]
        released = riding = False
        try:
            async with self._locked(key):
                cached = await self._messages(key)
                before = await self._meta(key)
                meta = touched_meta(key, before, cached, stamped, now)
                if meta_changes:
                    meta = meta.with_changes(**meta_changes)
                store = self.store
                ride = let_go if stamped and isinstance(store, AppendsLettingGo) else None  # no records: no statement
                lease, riding = (None, False) if ride is None else (ride.lease, True)
                if settles and isinstance(store, AppendsSettling):
                    released = await store.append_settling(
                        key, stamped, settles, meta=meta if riding else None, lease=lease
                    )
                elif lease is not None and isinstance(store, AppendsLettingGo):
                    released = await store.append_letting_go(key, stamped, meta, lease)
                else:
                    await store.append(key, stamped)
                cached.extend(stamped)
                entry = self._entry(key)
                entry.meta, entry.meta_loaded = meta, True
                if riding:  # written with the records, under the lease's token
                    entry.meta_dirty = False
                    self._dirty.discard(key)
                elif before is None or meta_identity(meta) != meta_identity(before):
                    await self._save_meta_now(key, entry, meta)
                else:
                    self._mark_dirty(key, entry)
                self._notify("append", key)
        finally:
            if let_go is not None:
                let_go.settle(released)

    @runs_to_end
    async def clear(self, key: SessionKey) -> list[Message]:
        """Remove the working history (the meta stays, design §3) after appending it to the archive, so what
        was said is never lost; a crash in between at worst leaves it in both. Returns the archived messages."""
        async with self._locked(key):
            cleared = list(await self._messages(key))
            await self.store.clear(key, archive=cleared)
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
            removed = removed_messages(old, messages) if archive_removed else []
            await self.store.replace(key, messages, archive=removed)
            self._entry(key).messages = list(messages)
            self._notify("replace", key)
            return removed

    async def archived(self, key: SessionKey) -> list[Message]:
        return await self.store.read_archive(key)

    @runs_to_end
    async def rewrite_archive(self, key: SessionKey, change: Callable[[list[Message]], list[Message]]) -> bool:
        """Under the session's lock: replace the archive with `change(archived records)`, atomically (a redaction);
        an unchanged list leaves it alone. True when it was rewritten."""
        async with self._locked(key):
            old = await self.store.read_archive(key)
            new = change(old)
            if new == old:
                return False
            await self.store.rewrite_archive(key, new)
            return True

    @runs_to_end
    async def delete(self, key: SessionKey, *, also: Iterable[Path] = ()) -> bool:
        """Delete everything stored of the session: the files in `also` (the caller's, e.g. the chat's own memory
        file), then history, archive and, last, the meta, so a delete cut short still lists the session and can be
        repeated. Links are removed, never followed. True if anything existed."""
        extra = list(also)
        async with self._locked(key):
            try:
                gone = await _delete_files(extra) if extra else False
                gone = await self.store.delete(key) or gone
            finally:
                self._entries.pop(key, None)
                self._dirty.discard(key)
                self._evict_when_written.discard(key)
            self._notify("delete", key)
            return gone

    def evict(self, key: SessionKey) -> None:
        """Forget the cached copy (the store is untouched); the next access reloads it. A session whose meta is
        not written yet stays cached until it is (its write is brought forward)."""
        entry = self._entries.get(key)
        if key in self._users:
            return
        if entry is not None and entry.meta_dirty:
            self._evict_when_written.add(key)
            self._schedule_flush(0.0)
            return
        self._entries.pop(key, None)
        self._locks.pop(key, None)

    async def reload(self, key: SessionKey) -> None:
        """Drop the cached history and meta of `key` now, a meta not yet written too (another instance may have
        written a newer one): the next access reads the store. Observers are told (`reload`), so what they keep
        of the session (the context builder's converted messages) goes as well."""
        async with self._locked(key):
            self._entries.pop(key, None)
            self._dirty.discard(key)
            self._evict_when_written.discard(key)
        self._notify("reload", key)

    def exists(self, key: SessionKey) -> bool:
        """Synchronous (the HTTP routes' look-up): the cache answers when it holds the session, else the store's
        quick `exists_now` (a stat for the files); a store without one is asked through `SessionStore.exists`."""
        entry = self._entries.get(key)
        if entry is not None and (entry.messages or entry.meta is not None):
            return True
        if isinstance(self.store, QuickLookup):
            return self.store.exists_now(key)
        raise TypeError("this store has no synchronous look-up: use `await history.store.exists(key)`")

    async def session_exists(self, key: SessionKey) -> bool:
        """Whether `key` has a history or a meta. A store with a quick look-up is the only writer of its data (the
        files: one instance per data directory), so the cache may answer; any other store (PostgreSQL, written by
        every instance) is asked each time: a session another instance deleted is never found in a stale cache."""
        if isinstance(self.store, QuickLookup):
            return self.exists(key)
        return await self.store.exists(key)

    # ---- meta written behind -------------------------------------------------------------------

    def _mark_dirty(self, key: SessionKey, entry: _Entry) -> None:
        entry.meta_dirty = True
        self._dirty.add(key)
        self._schedule_flush(self._meta_delay_s)

    def _schedule_flush(self, delay: float) -> None:
        if self._flush_timer is not None:
            if delay > 0:
                return
            self._flush_timer.cancel()
        self._flush_timer = asyncio.get_running_loop().call_later(delay, self._start_flush)

    def _start_flush(self) -> None:
        self._flush_timer = None
        task = asyncio.get_running_loop().create_task(self.flush())
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def flush(self, only: SessionKey | None = None) -> None:
        """Write every meta (or only `only`'s) that is newer in the cache than in the store (not fsynced); one that
        cannot be written stays dirty for the next flush."""
        for key in list(self._dirty) if only is None else [k for k in self._dirty if k == only]:
            async with self._locked(key):
                entry = self._entries.get(key)
                self._dirty.discard(key)
                if entry is not None and entry.meta_dirty and entry.meta is not None:
                    await self._save_meta_now(key, entry, entry.meta)
            if key in self._evict_when_written and key not in self._dirty:
                self._evict_when_written.discard(key)
                self.evict(key)

    async def aclose(self) -> None:
        """Write what is still written behind (shutdown: after the last turn); a store made here (not handed in) is
        closed too, so its commit log is checkpointed empty and nothing is replayed onto a file changed later."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)
        await self.flush()
        if self._own_store is not None:  # its commit log checkpointed and let go (another process may own it now)
            await self._own_store.aclose()

    async def _save_meta_now(self, key: SessionKey, entry: _Entry, meta: SessionMeta) -> None:
        """Write `meta` (not fsynced: it is derivable); on failure it is logged and stays dirty in the cache."""
        try:
            await self.store.write_meta(key, meta, durable=False)
        except FencedWriteError:  # another instance runs the session now and keeps its meta: ours is older
            log.info("session_meta_write_fenced", session_key=str(key))
            entry.meta_dirty = False
            return
        except StorageError as e:
            errno = getattr(e.__cause__, "errno", None)
            log.warning("session_meta_write_failed", session_key=str(key), error_type=type(e).__name__, errno=errno)
            entry.meta_dirty = True
            self._dirty.add(key)
            self._schedule_flush(self._meta_delay_s)  # retried later, not only when the session writes again
            return
        entry.meta_dirty = False

    # ---- meta ----------------------------------------------------------------------------------

    async def _meta(self, key: SessionKey) -> SessionMeta | None:
        entry = self._entry(key)
        if not entry.meta_loaded or not (self._trusted(key) or entry.meta_dirty):
            entry.meta = await self.store.read_meta(key)
            entry.meta_loaded = True
        return entry.meta

    async def _store_meta(self, key: SessionKey, meta: SessionMeta) -> None:
        """Write the meta durably, then cache it; StorageError (cache unchanged) when it cannot be written."""
        await self.store.write_meta(key, meta, durable=True)
        entry = self._entry(key)
        entry.meta, entry.meta_loaded, entry.meta_dirty = meta, True, False
        self._dirty.discard(key)

    async def _store_derived_meta(self, key: SessionKey, meta: SessionMeta) -> None:
        """Save a meta derived from the history (a legacy session's); if that fails it is served from the cache
        and saved later: listing must work on a full disk too."""
        entry = self._entry(key)
        entry.meta, entry.meta_loaded = meta, True
        try:
            await self.store.write_meta(key, meta, durable=True)
        except StorageError as e:
            log.warning("session_meta_write_failed", session_key=str(key), error_type=type(e).__name__)
            entry.meta_dirty = True
            self._dirty.add(key)
        else:
            entry.meta_dirty = False

    async def _history_exists(self, key: SessionKey) -> bool:
        return bool(await self._messages(key)) or await self.store.exists(key)

    @runs_to_end
    async def get_meta(self, key: SessionKey) -> SessionMeta | None:
        """The stored meta; a legacy session (history but no meta) gets one synthesised and saved."""
        async with self._locked(key):
            meta = await self._meta(key)
            if meta is None:
                if not await self._history_exists(key):
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
                await self._store_meta(key, meta)
            return meta

    @runs_to_end
    async def update_meta(self, key: SessionKey, **changes: Any) -> SessionMeta:
        """Change title / pinned / last_usage; the session must exist (KeyError otherwise). Title and pin are
        durable when this returns; `last_usage` alone (a per-turn statistic) is written behind."""
        async with self._locked(key):
            meta = await self._meta(key)
            if meta is None:
                if not await self._history_exists(key):
                    self._entries.pop(key, None)
                    raise KeyError(str(key))
                meta = synthesise_meta(key.chat_id, await self._messages(key), _now_ms(self._clock))
            meta = meta.with_changes(**changes)
            if set(changes) <= set(DERIVED_FIELDS):
                entry = self._entry(key)
                entry.meta, entry.meta_loaded = meta, True
                self._mark_dirty(key, entry)
            else:
                await self._store_meta(key, meta)
            return meta

    async def activity(self, agent: str) -> list[SessionActivity]:
        """When each of `agent`'s histories last changed, newest first (what AutoCompact and L3 pick by)."""
        return await self.store.activity(agent)

    async def list_sessions(self, agent: str, channel: str | None = None) -> list[tuple[SessionKey, SessionMeta]]:
        """Every session of `agent` (optionally one channel) with its meta, legacy ones given meta on the fly."""
        found: list[tuple[SessionKey, SessionMeta]] = []
        for key in await self.store.list_keys(agent):
            if channel is not None and key.channel != channel:
                continue
            try:
                meta = await self.get_meta(key)
            except StorageError:  # one bad entry (a planted link) must not hide every other session
                log.warning("session_entry_refused", agent=agent, file=key.file_stem)
                continue
            if meta is not None:
                found.append((key, meta))
        return found


async def _delete_files(paths: list[Path]) -> bool:
    try:
        return any(await asyncio.to_thread(lambda: [jsonl.delete_file(p) for p in paths]))
    except OSError as e:
        raise StorageError("could not delete the session's files") from e
