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

from agenthub.storage.atomic import atomic_write_bytes

log = structlog.get_logger(__name__)


class DedupStore:
    """Remembers ids for `ttl_s` seconds, across restarts.

    The memory is an append-only JSONL file (`{"k": id, "t": seen_at}`), fsynced per id, reloaded at
    construction with expired and torn lines dropped, and rewritten atomically when it holds more than
    twice the live entries. Entries are kept in the order they were seen, so expired ones are dropped
    from the front as time passes and memory stays bounded by the ids seen within one TTL.
    `check_and_add` is atomic within one event loop.
    """

    def __init__(self, path: Path, *, ttl_s: float, clock: Callable[[], float] = time.time, fsync: bool = True) -> None:
        self._path = path
        self._fsync = fsync
        self._ttl_s = ttl_s
        self._clock = clock
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._lines = 0
        self._lock = asyncio.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._load()

    def __len__(self) -> int:
        return len(self._seen)

    async def check_and_add(self, key: str) -> bool:
        """Return True when `key` was already seen (a duplicate); otherwise remember it and return False."""
        async with self._lock:
            now = self._clock()
            self._expire(now)
            if key in self._seen:
                return True
            self._seen[key] = now
            line = json.dumps({"k": key, "t": now}, ensure_ascii=False) + "\n"
            try:
                await asyncio.to_thread(self._append, line)
            except Exception:
                del self._seen[key]  # not durable: let the platform's retry through rather than lose the message
                raise
            self._lines += 1
            if self._lines > 2 * len(self._seen) + 100:
                await asyncio.to_thread(self._rewrite)
            return False

    def _load(self) -> None:
        if not self._path.exists():
            return
        now = self._clock()
        with self._path.open("rb") as f:
            for raw in f:
                try:
                    item = json.loads(raw)
                    key, seen_at = str(item["k"]), float(item["t"])
                except (ValueError, KeyError, TypeError):
                    log.warning("dedup_line_skipped", path=str(self._path))
                    continue
                if now - seen_at < self._ttl_s:
                    self._seen[key] = seen_at
                    self._seen.move_to_end(key)
        self._rewrite()

    def _expire(self, now: float) -> None:
        while self._seen:
            key, seen_at = next(iter(self._seen.items()))
            if now - seen_at < self._ttl_s:
                return
            del self._seen[key]

    def _append(self, line: str) -> None:
        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
            if self._fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def _rewrite(self) -> None:
        lines = (json.dumps({"k": k, "t": t}, ensure_ascii=False) + "\n" for k, t in self._seen.items())
        atomic_write_bytes(self._path, "".join(lines).encode("utf-8"), durable=self._fsync)
        self._lines = len(self._seen)
