"""One instance's link to the shared outbox; `down` cuts only this instance off (a dead process: nothing it does
reaches the database any more, not even the outcome of a send it was making)."""

from __future__ import annotations

from typing import Any

from agenthub.errors import StorageError
from agenthub.storage.outbox import OutboxRow, Outcome
from agenthub.storage.ports import Outbox


class OutboxView:
    def __init__(self, shared: Outbox) -> None:
        self._shared = shared
        self.down = False

    async def put(self, target: str, payload: dict[str, Any]) -> int:
        self._check()
        return await self._shared.put(target, payload)

    async def claim(self, target: str, holder: str, claim_s: float) -> OutboxRow | None:
        self._check()
        return await self._shared.claim(target, holder, claim_s)

    async def finish(self, row_id: int, holder: str, reason: str | None) -> None:
        self._check()
        await self._shared.finish(row_id, holder, reason)

    async def outcome(self, row_id: int) -> Outcome | None:
        self._check()
        return await self._shared.outcome(row_id)

    async def withdraw(self, row_id: int, reason: str) -> bool:
        self._check()
        return await self._shared.withdraw(row_id, reason)

    async def expire_claims(self, target: str) -> int:
        self._check()
        return await self._shared.expire_claims(target)

    async def discard(self, row_id: int) -> None:
        self._check()
        await self._shared.discard(row_id)

    def _check(self) -> None:
        if self.down:
            raise StorageError("outbox unreachable")
