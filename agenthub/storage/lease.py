"""Leases: at most one holder of a name (a session's turns, the L3 leader, a WeCom bot's connection) at a time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import structlog

from agenthub.clock import Clock, monotonic_clock, sleep_until
from agenthub.errors import StorageError
from agenthub.session_keys import SessionKey
from agenthub.storage.lease_lane import Kept, LaneRenewals, RenewalLane
from agenthub.storage.meta import SessionMeta
from agenthub.storage.ports import BatchRenewal, LeaseStore
from agenthub.storage.store import HistoryRecord
from agenthub.storage.usage import ClaimRide

log = structlog.get_logger(__name__)

INSTANCE_LEASE_PREFIX = "instance:"
"""An instance is alive while it holds lease `instance:<holder>`: a shared inbox hands a dead one's entries over."""


def instance_lease(holder: str) -> str:
    return INSTANCE_LEASE_PREFIX + holder


@dataclass(frozen=True)
class Lease:
    """A granted lease. `token` grows with every new grant of `name` (a fencing token): a write made under an older
    token is refused by a store that checks it."""

    name: str
    holder: str
    token: int
    expires_at: float


def renewal_due(lease: Lease, ttl_s: float) -> float:
    """When a lease granted for `ttl_s` is renewed: a third of it after its grant (its `expires_at` is counted from
    before the request was sent), so at once when the grant itself arrived late."""
    return lease.expires_at - ttl_s * 2 / 3


async def renew_all(store: LeaseStore, leases: list[Lease], ttl_s: float) -> list[Lease | None]:
    """`leases` renewed: in one request when the store can (`BatchRenewal`), else one request each."""
    if isinstance(store, BatchRenewal):
        return await store.renew_many(leases, ttl_s)
    return list(await asyncio.gather(*(store.renew(lease, ttl_s) for lease in leases)))


@dataclass(frozen=True)
class SessionClaim:
    """A session lease granted and its history fenced with the grant's token, in one request (`SessionClaims`)."""

    token: int
    moved: bool
    """Someone else may have written the history since this store last held it (`SessionStore.fence`'s answer)."""
    fenced_out: bool = False
    """A newer token fenced the session already: the grant must be given back, nothing written under it."""
    new: bool = False
    """No lease ever fenced the session before this grant: no other instance has held (or written under) it."""


@runtime_checkable
class SessionClaims(Protocol):
    """A session store that takes a session's lease and fences the history in one request (PostgreSQL): what a
    turn pays to move to another instance, instead of an acquire, then a fence, then a reload of the history."""

    def claims_with(self, leases: object) -> bool:
        """Whether `leases` (a lease store) is the one this store's claims take leases from."""
        ...

    async def claim(
        self, key: SessionKey, name: str, holder: str, ttl_s: float, *, ride: ClaimRide | None = None
    ) -> SessionClaim | None:
        """Acquire lease `name` for `holder` (as `LeaseSignals.acquire_or_ask`: refused, None, and the holder asked
        for it) and, granted, `fence(key, token)`; the caller makes the `Lease` (its time counted from before).
        `ride`: a budget check and reservation made in the same request once granted (`ClaimRide.rows`)."""
        ...

    async def let_go(self, key: SessionKey, lease: Lease) -> None:
        """`fence(key, None)` and release `lease` in one request, with the meta written behind under the lease."""
        ...


@dataclass(frozen=True)
class LetGoRide:
    """A session's lease to be released in the statement that writes its turn's answer (`AppendsLettingGo`), made
    by whoever holds it once it knows the session is let go at the end of the turn. `settle(released)` is called
    exactly once, whatever happens to the append: True when the lease was released with it, False otherwise (the
    append failed, or landed without the release: the lease is still held and let go the usual way)."""

    lease: Lease
    settle: Callable[[bool], None]


@runtime_checkable
class AppendsLettingGo(Protocol):
    """A session store that can release a session's lease in the statement of an append (PostgreSQL)."""

    async def append_letting_go(
        self, key: SessionKey, records: Sequence[HistoryRecord], meta: SessionMeta, lease: Lease
    ) -> bool:
        """`records` appended and `meta` written under `lease`'s token and, in the same statement, `lease`
        released while still held with its token; whether it was (False: still held). FencedWriteError, nothing
        written, when a newer lease fenced the session."""
        ...


WANTED, FREED = "wanted", "freed"
"""The signals of a `LeaseSignals` store: a lease's holder is asked to let it go; a lease was released."""


class InProcessLeases:
    """Leases inside one process: the files mode (one instance per data directory) and tests."""

    def __init__(self, *, clock: Clock = monotonic_clock) -> None:
        self._clock = clock
        self._leases: dict[str, Lease] = {}
        self._tokens: dict[str, int] = {}

    async def acquire(self, name: str, holder: str, ttl_s: float) -> Lease | None:
        now = self._clock()
        current = self._leases.get(name)
        if current is not None and current.holder != holder and current.expires_at > now:
            return None
        if current is not None and current.holder == holder and current.expires_at > now:
            token = current.token
        else:
            token = self._tokens[name] = self._tokens.get(name, 0) + 1
        lease = self._leases[name] = Lease(name, holder, token, now + ttl_s)
        return lease

    async def renew(self, lease: Lease, ttl_s: float) -> Lease | None:
        current = self._leases.get(lease.name)
        if current is None or current.token != lease.token or current.expires_at <= self._clock():
            return None
        return await self.acquire(lease.name, lease.holder, ttl_s)

    async def release(self, lease: Lease) -> None:
        current = self._leases.get(lease.name)
        if current is not None and current.token == lease.token:
            del self._leases[lease.name]


class LeaseTakeovers:
    """How many leases an instance gained after another holder had them (a failover; for /metrics)."""

    def __init__(self) -> None:
        self.count = 0


class LeaseKeeper:
    """Holds one lease for as long as it can: tries to acquire it every `ttl_s / 3`, renews it at the same pace,
    and calls `on_gained` / `on_lost` when that changes (a singleton's start and stop).

    A holder that cannot renew (the store errs, or does not answer) gives the lease up a third of `ttl_s` before
    it expires by its own clock: a standby may take it at expiry, so the holder's stop must be done by then.

    Over a store with a renewal lane (`LaneRenewals`: PostgreSQL) a held lease is renewed there, on a thread of
    its own, so a starved event loop does not let it lapse; this task then only waits for the lane to report it
    lost, and acquires it again."""

    def __init__(
        self,
        store: LeaseStore,
        name: str,
        holder: str,
        *,
        ttl_s: float,
        on_gained: Callable[[Lease], None] = lambda lease: None,
        on_lost: Callable[[], None] = lambda: None,
        clock: Clock = monotonic_clock,
        takeovers: LeaseTakeovers | None = None,
    ) -> None:
        """`takeovers` counts the gains of a lease another holder had last."""
        self._store, self._name, self._holder, self._ttl_s = store, name, holder, ttl_s
        self._takeovers = takeovers
        self._last_token = 0
        self._on_gained, self._on_lost, self._clock = on_gained, on_lost, clock
        self._lease: Lease | None = None
        self._lanes = store if isinstance(store, LaneRenewals) else None
        self._lane: RenewalLane | None = None
        """The lane `_kept` is on (the store's current one when it was gained)."""
        self._kept: Kept | None = None
        """The held lease as the lane keeps it (its newest grant), while it does."""
        self._lane_lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._margin_s = ttl_s / 3
        """How long before its expiry an unrenewed lease is given up: the time the holder's stop may take."""

    @property
    def lease(self) -> Lease | None:
        """The held lease, as last renewed (by the lane's thread, when there is one)."""
        kept = self._kept
        if kept is not None:
            return None if kept.lost else kept.lease
        return self._lease

    def _hold(self, lease: Lease | None) -> None:
        """`lease` is held from now on (None: none is); a gain over a lane is handed to it to renew."""
        kept, self._kept = self._kept, None
        if kept is not None and self._lane is not None:
            self._lane.drop(kept)
        self._lease = lease
        if lease is not None and self._lanes is not None:
            self._lane = self._lanes.renewal_lane()
            self._lane_lost.clear()
            self._kept = self._lane.keep(lease, self._ttl_s, on_lost=self._kept_lost)

    def _kept_lost(self) -> None:
        """The lane gave a lease up (on this loop): lost, unless it was let go meanwhile (then `_kept` is another
        one, or none)."""
        kept = self._kept
        if kept is not None and kept.lost:
            self._kept = None
            self._lease = None
            log.warning("lease_lost", lease=self._name)
            self._on_lost()
            self._lane_lost.set()

    @property
    def held(self) -> bool:
        lease = self.lease
        return lease is not None and self._clock() < self._give_up_at(lease)

    @property
    def hold(self) -> int | None:
        """While held, the lease's token: a renewal never revives an expired lease and a grant after an expiry
        raises the token, so the same number means the lease stayed live in the store all along."""
        lease = self.lease
        return lease.token if lease is not None and self.held else None

    def _give_up_at(self, lease: Lease) -> float:
        return lease.expires_at - self._margin_s

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"lease-{self._name}")

    async def stop(self) -> None:
        """Stop trying; a held lease is released so a standby takes over at once, not after `ttl_s`."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])  # our own cancellation still propagates; the task's does not
            self._task = None
        lease = self.lease
        if lease is not None:
            self._hold(None)
            self._on_lost()
            with contextlib.suppress(StorageError):
                await self._store.release(lease)

    async def step(self) -> None:
        """One acquire-or-renew round (the loop's body; tests call it directly). A lease the lane renews needs
        none."""
        if self._kept is not None:
            return
        try:
            lease = await self._attempt()
        except StorageError:
            log.warning("lease_store_unavailable", lease=self._name)
            lease = self.lease
            if lease is not None and self._clock() >= self._give_up_at(lease):
                self._lose()
            return
        if lease is None:
            if self.lease is not None:
                self._lose()
        elif self.lease is None:
            self._hold(lease)
            log.info("lease_gained", lease=self._name, fence=lease.token)
            self._count_takeover(lease)
            self._on_gained(lease)
        else:
            self._hold(lease)

    def _count_takeover(self, lease: Lease) -> None:
        """Every grant raises the token by one: a gain whose token is not the one after ours (or 1, the first
        grant ever) follows a grant to another holder."""
        if self._takeovers is not None and lease.token not in (1, self._last_token + 1):
            self._takeovers.count += 1
            log.info("lease_taken_over", lease=self._name, fence=lease.token)
        self._last_token = lease.token

    async def _attempt(self) -> Lease | None:
        lease = self.lease
        if lease is None:
            return await self._store.acquire(self._name, self._holder, self._ttl_s)
        return await self._store.renew(lease, self._ttl_s)

    def _lose(self) -> None:
        self._hold(None)
        log.warning("lease_lost", lease=self._name)
        self._on_lost()

    async def _run(self) -> None:
        while True:
            if self._kept is not None:  # the lane renews it: wait until it reports it lost
                await self._lane_lost.wait()
                self._lane_lost.clear()
                await sleep_until(self._clock, self._clock() + self._ttl_s / 3)
                continue
            await self._step_in_time()
            if self._kept is None:
                await sleep_until(self._clock, self._next_attempt_at())

    def _next_attempt_at(self) -> float:
        """Free: a third of the ttl from now. Held: a third of the ttl after the grant, by the lease's own time, so
        a grant that arrived late (a loaded store) is renewed at once instead of at the moment it is given up."""
        if self.lease is None:
            return self._clock() + self._ttl_s / 3
        return renewal_due(self.lease, self._ttl_s)

    async def _step_in_time(self) -> None:
        """`step()`, but a held lease is given up at its deadline even while the store has not answered."""
        lease = self.lease
        if lease is None or self._kept is not None:
            await self.step()
            return
        give_up_at = self._give_up_at(lease)
        attempt = asyncio.create_task(self.step(), name=f"lease-{self._name}-attempt")
        deadline = asyncio.create_task(sleep_until(self._clock, give_up_at), name=f"lease-{self._name}-deadline")
        try:
            await asyncio.wait({attempt, deadline}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            deadline.cancel()
            if not attempt.done():
                attempt.cancel()
                await asyncio.wait([attempt])
        if not attempt.cancelled():
            attempt.result()  # an error of `step()` itself is not hidden
        lease = self.lease
        if lease is not None and self._kept is None and self._clock() >= self._give_up_at(lease):
            log.warning("lease_store_too_slow", lease=self._name)
            self._lose()
