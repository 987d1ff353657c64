"""Lease stores for tests: one that can go down, one whose grants arrive late, and one instance's view of a store
shared by several."""

from __future__ import annotations

import asyncio

from agenthub.clock import Clock, ManualClock
from agenthub.errors import StorageError
from agenthub.session_keys import SessionKey
from agenthub.storage.lease import InProcessLeases, Lease
from agenthub.storage.ports import LeaseStore
from agenthub.storage.postgres import PostgresSessionStore


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


class LateGrants(InProcessLeases):
    """A store whose grants of the leases named `prefix…` reach the caller `delay_s` after they were made (a loaded
    database, a slow network): the lease's time runs from the grant, as `PostgresLeases` counts it from before its
    request was sent."""

    def __init__(
        self, clock: ManualClock, delay_s: float, prefix: str = "session:", *, round_trip_s: float = 0.0
    ) -> None:
        super().__init__(clock=clock)
        self.manual, self.delay_s, self.prefix = clock, delay_s, prefix
        self.round_trip_s = round_trip_s
        """A renewal's real (not manual-clock) time on the wire: it answers after the loop has moved on."""
        self._granted: dict[str, int] = {}

    async def renew(self, lease: Lease, ttl_s: float) -> Lease | None:
        await asyncio.sleep(self.round_trip_s)
        return await super().renew(lease, ttl_s)

    async def acquire(self, name: str, holder: str, ttl_s: float) -> Lease | None:
        lease = await super().acquire(name, holder, ttl_s)  # a renewal comes here too, with the same token
        if lease is not None and name.startswith(self.prefix) and self._granted.get(name) != lease.token:
            self._granted[name] = lease.token  # a new grant: it arrives late
            self.manual.advance(self.delay_s)
        return lease


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


class BrokenLeases(InProcessLeases):
    """A lease store whose driver fails with an error it does not translate into a StorageError (a bug, a driver
    upgrade): whatever opens a lease over it raises."""

    async def acquire(self, name: str, holder: str, ttl_s: float) -> Lease | None:
        raise RuntimeError("lease driver failed")


def session_lease(k: SessionKey) -> str:
    """The lease name of session `k`."""
    return f"session:{k}"


async def claimed(store: PostgresSessionStore, k: SessionKey, holder: str, ttl_s: float) -> Lease | None:
    """`k`'s lease claimed through `store` for `holder`, None when refused or fenced out."""
    granted = await store.claim(k, session_lease(k), holder, ttl_s)
    if granted is None or granted.fenced_out:
        return None
    return Lease(session_lease(k), holder, granted.token, 0.0)
