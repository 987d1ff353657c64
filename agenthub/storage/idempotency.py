"""Idempotency keys of HTTP chat requests (design §12): which request took a key, whether its message was stored,
and its final reply once answered; kept for a window. Files: one small file per key under `data/.idempotency/`
(durable: an answer survives a restart); PostgreSQL: the table `idempotency_keys` shared by every instance."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agenthub.errors import StorageError
from agenthub.storage.atomic import atomic_write_text
from agenthub.storage.json_text import json_text

IDEMPOTENCY_DIR = ".idempotency"
ACCEPT_GRACE_S = 60.0
"""A key taken whose message was never stored (the process died in between) is free again after this long."""
SWEEP_EVERY_S = 3600.0


@dataclass(frozen=True)
class IdempotencyRecord:
    """A live key: the request that took it (its body's `fingerprint`), and its final reply event once answered."""

    fingerprint: str
    accepted: bool = False
    final: dict[str, Any] | None = None


def _live(data: dict[str, Any] | None, now: float, window_s: float) -> bool:
    if data is None or now - float(data["created_at"]) >= window_s:
        return False
    return bool(data.get("accepted")) or now - float(data["created_at"]) < ACCEPT_GRACE_S


def _record(data: dict[str, Any]) -> IdempotencyRecord:
    return IdempotencyRecord(str(data["fingerprint"]), bool(data.get("accepted")), data.get("final"))


class InMemoryIdempotency:
    """The keys of one process (tests; an API built without stores)."""

    def __init__(self, *, window_s: float, clock: Callable[[], float] = time.time) -> None:
        self.window_s = window_s
        self._clock = clock
        self._keys: dict[tuple[str, str], dict[str, Any]] = {}

    async def claim(self, scope: str, key: str, fingerprint: str) -> IdempotencyRecord | None:
        now = self._clock()
        found = self._keys.get((scope, key))
        if found is not None and _live(found, now, self.window_s):
            return _record(found)
        self._keys[(scope, key)] = {"fingerprint": fingerprint, "created_at": now, "accepted": False, "final": None}
        return None

    async def get(self, scope: str, key: str) -> IdempotencyRecord | None:
        found = self._keys.get((scope, key))
        return _record(found) if found is not None and _live(found, self._clock(), self.window_s) else None

    async def accepted(self, scope: str, key: str) -> None:
        if (found := self._keys.get((scope, key))) is not None:
            found["accepted"] = True

    async def finish(self, scope: str, key: str, final: dict[str, Any]) -> None:
        if (found := self._keys.get((scope, key))) is not None:
            found["final"] = final

    async def release(self, scope: str, key: str) -> None:
        self._keys.pop((scope, key), None)


class FileIdempotency:
    """One JSON file per key in `data/.idempotency/` (named by a digest of scope and key), written atomically in a
    worker thread; one daemon per data directory, so a lock in the process makes `claim` atomic."""

    def __init__(
        self, data_dir: Path, *, window_s: float, fsync: bool = True, clock: Callable[[], float] = time.time
    ) -> None:
        self.root = data_dir / IDEMPOTENCY_DIR
        self.window_s = window_s
        self._fsync = fsync
        self._clock = clock
        self._lock = asyncio.Lock()
        self._last_sweep: float | None = None

    def _path(self, scope: str, key: str) -> Path:
        digest = hashlib.sha256(json.dumps([scope, key]).encode()).hexdigest()
        return self.root / f"{digest}.json"

    async def _read(self, scope: str, key: str) -> dict[str, Any] | None:
        try:
            return await asyncio.to_thread(_read_file, self._path(scope, key))
        except OSError as e:
            raise StorageError("could not read an idempotency key") from e

    async def _write(self, scope: str, key: str, data: dict[str, Any]) -> None:
        path, text = self._path(scope, key), json_text({"scope": scope, "key": key, **data})
        try:
            await asyncio.to_thread(_write_file, path, text, self._fsync)
        except OSError as e:  # a full or read-only disk: the callers' StorageError path, never a raw OSError
            raise StorageError("could not store an idempotency key") from e

    async def claim(self, scope: str, key: str, fingerprint: str) -> IdempotencyRecord | None:
        now = self._clock()
        async with self._lock:
            found = await self._read(scope, key)
            if _live(found, now, self.window_s):
                assert found is not None
                return _record(found)
            await self._write(scope, key, {"fingerprint": fingerprint, "created_at": now, "accepted": False})
        if self._last_sweep is None or now - self._last_sweep >= SWEEP_EVERY_S:
            self._last_sweep = now
            await asyncio.to_thread(_sweep, self.root, now - self.window_s)
        return None

    async def get(self, scope: str, key: str) -> IdempotencyRecord | None:
        found = await self._read(scope, key)
        return _record(found) if found is not None and _live(found, self._clock(), self.window_s) else None

    async def _update(self, scope: str, key: str, **changes: Any) -> None:
        async with self._lock:
            found = await self._read(scope, key)
            if found is not None:
                await self._write(scope, key, {**found, **changes})

    async def accepted(self, scope: str, key: str) -> None:
        await self._update(scope, key, accepted=True)

    async def finish(self, scope: str, key: str, final: dict[str, Any]) -> None:
        await self._update(scope, key, final=final)

    async def release(self, scope: str, key: str) -> None:
        async with self._lock:
            try:
                await asyncio.to_thread(self._path(scope, key).unlink, missing_ok=True)
            except OSError as e:
                raise StorageError("could not release an idempotency key") from e


def _read_file(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):  # none, or a torn write the atomic rename never made visible
        return None
    return data if isinstance(data, dict) and "fingerprint" in data and "created_at" in data else None


def _write_file(path: Path, text: str, durable: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text, durable=durable)


def _sweep(root: Path, before: float) -> None:
    """Remove the key files last written before `before` (out of the window)."""
    if not root.is_dir():
        return
    for path in root.glob("*.json"):
        try:
            if path.stat().st_mtime < before:
                path.unlink(missing_ok=True)
        except OSError:
            continue
