"""A durable TTL set of seen platform message ids, so platform retries never produce a second answer."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import structlog

from agenthub import jsonsafe
from agenthub.errors import PathRefusedError
from agenthub.storage import jsonl
from agenthub.storage.atomic import atomic_write_bytes
from agenthub.storage.ports import SeenIds

log = structlog.get_logger(__name__)


SeenIdsOpener = Callable[[str, float], SeenIds]
"""(name, ttl_s) → a channel's dedup memory `name`: what `ChannelContext.open_seen_ids` holds."""


class DedupStore:
    """Remembers ids for `ttl_s` seconds, across restarts.

    The memory is an append-only JSONL file (`{"k": id, "t": seen_at}`), reloaded at construction with
    expired and torn lines dropped, and rewritten atomically when it holds more than twice the live entries.
    Writes are group-committed: ids that arrive while a write is in flight go out together in the next single
    write + fsync, so a burst of N new ids costs about two fsyncs, not N. `check_and_add` returns only once
    its id is durable. Entries are kept in the order they were seen, so expired ones are dropped from the
    front and memory stays bounded by the ids seen within one TTL. Atomic within one event loop.
    """

    def __init__(self, path: Path, *, ttl_s: float, clock: Callable[[], float] = time.time, fsync: bool = True) -> None:
        self._path = path
        self._fsync = fsync
        self._ttl_s = ttl_s
        self._clock = clock
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._lines = 0
        self._batch: list[tuple[str, float]] = []
        self._batch_done: asyncio.Future[None] | None = None
        self._pending: dict[str, asyncio.Future[None]] = {}
        self._flusher: asyncio.Task[None] | None = None
        path.parent.mkdir(parents=True, exist_ok=True)
        self._load()

    @property
    def ttl_s(self) -> float:
        """How long an id is remembered, in seconds."""
        return self._ttl_s

    def __len__(self) -> int:
        return len(self._seen)

    async def check_and_add(self, key: str) -> bool:
        """Return True when `key` was already seen (a duplicate); otherwise remember it durably and return False.

        A write failure raises and forgets the id, so the platform's retry gets through rather than being lost.
        """
        while True:
            pending = self._pending.get(key)
            if pending is None:
                break
            await asyncio.wait([pending])  # the first sighting is being written: its outcome decides
        now = self._clock()
        self._expire(now)
        if key in self._seen:
            return True
        self._seen[key] = now
        done = self._enqueue(key, now)
        self._pending[key] = done
        try:
            await asyncio.shield(done)
        except Exception:
            if self._seen.get(key) == now:
                del self._seen[key]
            raise
        finally:
            if self._pending.get(key) is done:
                del self._pending[key]
        return False

    async def forget(self, key: str) -> None:
        """Take `key` back durably: a tombstone line (seen at 0, so expired) that the loader applies in order."""
        while (pending := self._pending.get(key)) is not None:
            await asyncio.wait([pending])
        if self._seen.pop(key, None) is None:
            return
        await asyncio.shield(self._enqueue(key, 0.0))

    def _enqueue(self, key: str, seen_at: float) -> asyncio.Future[None]:
        if self._batch_done is None:
            self._batch_done = asyncio.get_running_loop().create_future()
        self._batch.append((key, seen_at))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush(), name="dedup-flush")
        return self._batch_done

    async def _flush(self) -> None:
        """Write batches until none is waiting; each batch is one write and one fsync."""
        while self._batch:
            batch, done = self._batch, self._batch_done
            self._batch, self._batch_done = [], None
            assert done is not None
            lines = "".join(json.dumps({"k": k, "t": t}, ensure_ascii=False) + "\n" for k, t in batch)
            try:
                await asyncio.to_thread(self._append, lines)
            except Exception as e:
                log.error("dedup_write_failed", path=str(self._path), error=str(e))
                done.set_exception(e)
                done.exception()  # retrieved here: every waiter re-raises it through its own shield
                continue
            self._lines += len(batch)
            if self._lines > 2 * len(self._seen) + 100:  # compact before answering: no task outlives its callers
                for key, _ in batch:
                    self._pending.pop(key, None)  # written now, so part of the snapshot
                await self._compact()
            done.set_result(None)

    async def _compact(self) -> None:
        try:
            await asyncio.to_thread(self._rewrite, self._durable_items())
        except OSError as e:  # the appended file is still complete; compaction is only housekeeping
            log.warning("dedup_compaction_failed", path=str(self._path), error=str(e))

    def _load(self) -> None:
        try:
            data = jsonl.read_bytes_no_follow(self._path)
        except FileNotFoundError:
            return
        except PathRefusedError:  # a planted link is never read; the rewrite below replaces it by a real file
            log.warning("dedup_link_replaced", path=str(self._path))
            data = b""
        now = self._clock()
        for raw in data.splitlines():
            try:
                item = jsonsafe.loads(raw)
                key, seen_at = str(item["k"]), float(item["t"])
            except (ValueError, KeyError, TypeError):
                log.warning("dedup_line_skipped", path=str(self._path))
                continue
            if now - seen_at < self._ttl_s:
                self._seen[key] = seen_at
                self._seen.move_to_end(key)
            else:  # expired, or a tombstone written by `forget` after the id's line
                self._seen.pop(key, None)
        self._rewrite(list(self._seen.items()))

    def _expire(self, now: float) -> None:
        while self._seen:
            key, seen_at = next(iter(self._seen.items()))
            if now - seen_at < self._ttl_s:
                return
            del self._seen[key]

    def _append(self, line: str) -> None:
        with jsonl.opened_no_follow(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT) as fd:  # a link: refused
            os.write(fd, line.encode())
            if self._fsync:
                os.fsync(fd)

    def _durable_items(self) -> list[tuple[str, float]]:
        """A snapshot of the ids already written (ids still waiting for their batch go out with it)."""
        pending = {k for k, f in self._pending.items() if not f.done()}
        return [(k, t) for k, t in self._seen.items() if k not in pending]

    def _rewrite(self, items: list[tuple[str, float]]) -> None:
        lines = (json.dumps({"k": k, "t": t}, ensure_ascii=False) + "\n" for k, t in items)
        atomic_write_bytes(self._path, "".join(lines).encode("utf-8"), durable=self._fsync)
        self._lines = len(items)
