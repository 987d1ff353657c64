"""Lease stores for tests: one that can go down, and one instance's view of a store shared by several."""

from __future__ import annotations

from agenthub.clock import Clock
from agenthub.errors import StorageError
from agenthub.storage.lease import InProcessLeases, Lease, LeaseStore


class DownableLeases(InProcessLeases):
    """A lease store whose server can go away (`down`): acquire and renew raise StorageError meanwhile."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock=clock)
        self.down = False

    async def acquire(self, name: str, holder: str, ttl_s: float) -> Lease | None:
        if self.down:
            raise StorageError("store unavailable")
        return await super().acquire(name, holder, ttl_s)

    async def renew(self, lease: Lease, ttl_s: float) -> Lease | None:
        if self.down:
            raise StorageError("store unavailable")
        return await super().renew(lease, ttl_s)


class InstanceView:
    """One instance's link to the shared lease store; `down` cuts only this instance off (a dead process, a
    broken network: no renewal, no release)."""

    def __init__(self, shared: LeaseStore) -> None:
        self._shared = shared
        self.down = False
        self.down_for = ""
        """When set, only the leases whose name starts with it are cut off (e.g. `instance:`: a liveness lease whose
        renewals stall while the session leases still get through)."""

    async def acquire(self, name: str, holder: str, ttl_s: float) -> Lease | None:
        self._check(name)
        return await self._shared.acquire(name, holder, ttl_s)

    async def renew(self, lease: Lease, ttl_s: float) -> Lease | None:
        self._check(lease.name)
        return await self._shared.renew(lease, ttl_s)

    async def release(self, lease: Lease) -> None:
        self._check(lease.name)
        await self._shared.release(lease)

    def _check(self, name: str) -> None:
        if self.down or (self.down_for and name.startswith(self.down_for)):
            raise StorageError("lease store unreachable")
