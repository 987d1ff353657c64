"""`RenewalLane`: an instance's held leases renewed on a thread of its own, with its own event loop and connection,
so a main loop starved of CPU (a burst of turns, a loaded host) does not let them lapse; a lane with nothing to
renew for a while ends both, and starts again with the next lease kept."""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import structlog

from agenthub.clock import Clock, monotonic_clock
from agenthub.errors import StorageError

if TYPE_CHECKING:
    from agenthub.storage.lease import Lease

log = structlog.get_logger(__name__)

BATCH_FRACTION = 6
"""A lease is renewed a sixth of its ttl after its grant; one due within a sixth of the ttl joins the request."""
RETRY_FRACTION = 12
"""A renewal the store did not answer is tried again after `ttl_s / 12` (until the lease is given up)."""
GIVE_UP_FRACTION = 3
"""An unrenewed lease is given up a third of its ttl before it expires: the time its owner's stop may take."""
MAX_WAIT_S = 1.0
"""The lane looks at its clock at least this often (a clock it cannot be woken by, e.g. a test's)."""
CLOSE_TIMEOUT_S = 5.0
"""How long `close` waits for the thread to end (it only has to drop a connection)."""
IDLE_S = 30.0
"""A lane that has kept no lease this long ends its thread and closes its connection (until the next lease)."""


class LaneRenewer(Protocol):
    """The lane's own link to the lease store, made and used on the lane's loop only."""

    async def renew_many(self, leases: list[Lease], ttl_s: float) -> list[Lease | None]:
        """Each lease extended (None: refused, another holder has it), in one request; StorageError on failure."""
        ...

    async def close(self) -> None:
        """Close the link at once, even under a request in flight (which then fails): no round trip."""
        ...


@runtime_checkable
class LaneRenewals(Protocol):
    """A lease store whose held leases an instance keeps renewed on a `RenewalLane` (PostgreSQL)."""

    def renewal_lane(self) -> RenewalLane: ...


class Kept:
    """A lease the lane keeps renewed. `lease` is its newest grant (replaced by the lane's thread: read it, never
    keep a copy); `lost` turns True once the lane gave it up, before `on_lost` is called on the owner's loop."""

    def __init__(
        self, lease: Lease, ttl_s: float, on_lost: Callable[[], None], loop: asyncio.AbstractEventLoop
    ) -> None:
        self.lease = lease
        self.lost = False
        self.ttl_s = ttl_s
        self.next_at = renewal_due(lease, ttl_s)
        self.failed = False
        """Its last renewal got no answer: past its give-up time it is lost."""
        self._on_lost, self._loop = on_lost, loop

    @property
    def give_up_at(self) -> float:
        return self.lease.expires_at - self.ttl_s / GIVE_UP_FRACTION

    def report_lost(self) -> None:
        self.lost = True
        try:
            self._loop.call_soon_threadsafe(self._on_lost)
        except RuntimeError:  # the owner's loop is closed: nobody is left to stop
            pass


def renewal_due(lease: Lease, ttl_s: float) -> float:
    """A sixth of the ttl after the grant (`expires_at` counts from before the request was sent)."""
    return lease.expires_at - ttl_s * (BATCH_FRACTION - 1) / BATCH_FRACTION


class RenewalLane:
    """Renews every `Kept` lease on its own thread, all those due in one request through `open_renewer()`'s link.

    Fail closed: a renewal the store refused loses the lease at once; one it did not answer (the link died, the
    server is slow or gone) is retried on a new link, and the lease is lost at its give-up time. A lost lease is
    reported on its owner's loop (`call_soon_threadsafe`); its owner reads `Kept.lease` / `Kept.lost` without
    waiting for that. Idle (no lease kept for `idle_s`), the thread closes its link and ends; the next `keep`
    starts a new one (the thread gives its place up under the lock, and only while no lease is kept: a lease kept
    before that is renewed by the ending thread, which then stays). `close()` ends the thread and its link;
    leases still kept then are reported lost."""

    def __init__(
        self,
        open_renewer: Callable[[], Awaitable[LaneRenewer]],
        *,
        clock: Clock = monotonic_clock,
        name: str,
        idle_s: float = IDLE_S,
    ) -> None:
        self._open_renewer = open_renewer
        self._clock = clock
        self._name = name
        self._idle_s = idle_s
        self._lock = threading.Lock()
        self._kept: set[Kept] = set()
        self._wake_at = 0.0
        """When the lane's thread looks next (by `clock`): a lease kept that is due later does not wake it."""
        self._waker: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
        """The running thread's loop and the event that wakes it (replaced together when a new thread starts)."""
        self._thread: threading.Thread | None = None
        self._ended: concurrent.futures.Future[None] = concurrent.futures.Future()
        """Set when the running thread has ended (a new one for each thread)."""
        self._idle_since: float | None = None
        self._stopping = False
        self._renewer: LaneRenewer | None = None
        self.renewals = 0
        """Requests sent (for tests and /metrics)."""

    @property
    def closed(self) -> bool:
        return self._stopping

    def keep(self, lease: Lease, ttl_s: float, on_lost: Callable[[], None]) -> Kept:
        """Keep `lease` renewed from now on (the thread starts with the first); `on_lost` runs on the caller's
        loop once it is lost."""
        kept = Kept(lease, ttl_s, on_lost, asyncio.get_running_loop())
        with self._lock:
            if self._stopping:
                raise StorageError("the lease renewal lane is closed")
            self._kept.add(kept)
            self._start()
        if min(kept.next_at, kept.give_up_at) < self._wake_at:
            self._poke()
        return kept

    def drop(self, kept: Kept) -> None:
        """Stop renewing `kept` (released, or its owner stopped); no `on_lost` follows."""
        with self._lock:
            self._kept.discard(kept)

    async def close(self) -> None:
        """End the thread (its link closed); waits at most `CLOSE_TIMEOUT_S`, without blocking the caller's loop."""
        with self._lock:
            self._stopping = True
            thread, ended = self._thread, self._ended
        if thread is None:
            return
        self._poke()
        try:
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(ended)), CLOSE_TIMEOUT_S)
        except TimeoutError:
            log.error("lease_lane_did_not_stop", lane=self._name)
            return
        thread.join(timeout=CLOSE_TIMEOUT_S)

    def _start(self) -> None:
        """Under the lock: the thread and its loop, unless one runs."""
        if self._thread is not None:
            return
        loop, ended = asyncio.new_event_loop(), concurrent.futures.Future[None]()
        self._waker, self._ended, self._idle_since = (loop, asyncio.Event()), ended, None
        name = f"lease-lane-{self._name}"
        self._thread = threading.Thread(target=self._run_thread, args=(loop, ended), name=name, daemon=True)
        self._thread.start()

    def _poke(self) -> None:
        waker = self._waker
        if waker is not None:
            try:
                waker[0].call_soon_threadsafe(waker[1].set)
            except RuntimeError:  # the lane's loop has ended
                pass

    def _run_thread(self, loop: asyncio.AbstractEventLoop, ended: concurrent.futures.Future[None]) -> None:
        idle = False
        try:
            asyncio.set_event_loop(loop)
            idle = loop.run_until_complete(self._serve())
        except BaseException as e:  # a bug: every lease is reported lost below
            log.error("lease_lane_failed", lane=self._name, error_type=type(e).__name__, exc_info=e)
        finally:
            left: list[Kept] = []
            if not idle:  # stopped, or failed: the lane is closed
                with self._lock:
                    self._stopping = True
                    left, self._kept = list(self._kept), set()
            for kept in left:
                kept.report_lost()
            loop.close()
            ended.set_result(None)

    async def _serve(self) -> bool:
        """Rounds until the lane stops (False) or the thread has ended idle (True: its place given up, and with it
        `_renewer`, which is the next thread's from then on: its link was dropped before)."""
        idle = False
        try:
            while not self._stopping:
                await self._round()
                if self._idle_for() >= self._idle_s and await self._end_idle():
                    idle = True
                    return True
            return False
        finally:
            if not idle:
                await self._drop_renewer()

    def _idle_for(self) -> float:
        """How long the lane has kept no lease (0 while it keeps one)."""
        since = self._idle_since
        return 0.0 if since is None else self._clock() - since

    async def _end_idle(self) -> bool:
        """Close the link, then give the thread's place up unless a lease was kept meanwhile (under the lock: a
        `keep` after that starts a new thread). False: the thread goes on (a lease to renew, or the lane stops)."""
        await self._drop_renewer()
        with self._lock:
            if self._kept or self._stopping:
                self._idle_since = None
                return False
            self._thread = None
        log.info("lease_lane_idle_ended", lane=self._name)
        return True

    async def _round(self) -> None:
        """Lose the overdue, then renew those due (with those due soon) or wait until one is."""
        assert self._waker is not None
        wake = self._waker[1]
        self._wake_at = math.inf  # until the wait below: every lease kept wakes it
        wake.clear()  # before looking: a lease kept from now on wakes the wait below
        now = self._clock()
        for kept in self._snapshot():
            if now >= kept.lease.expires_at or (kept.failed and now >= kept.give_up_at):
                self._lose(kept, "store_unavailable" if kept.failed else "expired")
        kept_now = self._snapshot()
        if not kept_now:
            self._idle_since = now if self._idle_since is None else self._idle_since
            await self._wait(max(0.0, self._idle_s - self._idle_for()))
            return
        self._idle_since = None
        soonest = min(min(k.next_at, k.give_up_at) for k in kept_now)
        if soonest > now:
            await self._wait(soonest - now)
            return
        batch = [k for k in kept_now if k.next_at <= now + k.ttl_s / BATCH_FRACTION]
        results = await self._renew(batch)
        retry_at = self._clock()
        for kept, renewed in zip(batch, results, strict=True):
            if not self._holds(kept):
                continue
            if isinstance(renewed, _Unknown):
                kept.next_at, kept.failed = retry_at + kept.ttl_s / RETRY_FRACTION, True
            elif renewed is None:
                self._lose(kept, "refused")
            else:
                kept.lease, kept.next_at, kept.failed = renewed, renewal_due(renewed, kept.ttl_s), False

    async def _wait(self, seconds: float) -> None:
        assert self._waker is not None
        wake = self._waker[1]
        if self._stopping:
            return
        timeout = min(seconds, MAX_WAIT_S)
        self._wake_at = self._clock() + timeout
        try:
            async with asyncio.timeout(timeout):
                await wake.wait()
        except TimeoutError:
            pass

    async def _renew(self, batch: list[Kept]) -> list[Lease | _Unknown | None]:
        """The renewed leases, None for each refused, UNKNOWN for all when the store erred or was too slow. While
        it has not answered, each lease is lost at its limit (its give-up time; its expiry for one reached after
        that); the request is abandoned, its link dropped, once all are or the lane stops."""
        started = self._clock()
        limits = {id(k): k.give_up_at if started < k.give_up_at else k.lease.expires_at for k in batch}
        attempt = asyncio.ensure_future(self._send([k.lease for k in batch], batch[0].ttl_s))
        try:
            while not attempt.done() and not self._stopping:
                waiting = [k for k in batch if self._holds(k)]
                if not waiting:
                    break
                left = min(limits[id(k)] for k in waiting) - self._clock()
                await asyncio.wait([attempt], timeout=max(0.0, min(left, MAX_WAIT_S)))
                now = self._clock()
                for kept in waiting if not attempt.done() else []:
                    if now >= limits[id(kept)]:
                        self._lose(kept, "store_too_slow")
        finally:
            if not attempt.done():
                # the link closed first, under the request: cancelled on an open link, the driver would ask the
                # server to cancel it and wait for that (up to 10 s), with the lane's other leases waiting behind
                await self._drop_renewer()
                attempt.cancel()
                await asyncio.wait([attempt])
        if attempt.cancelled() or attempt.exception() is not None:
            return [UNKNOWN] * len(batch)
        return list(attempt.result())

    async def _send(self, leases: list[Lease], ttl_s: float) -> list[Lease | None]:
        """One request on the lane's link (opened first when there is none); the link is dropped on failure."""
        try:
            if self._renewer is None:
                self._renewer = await self._open_renewer()
                log.info("lease_lane_connected", lane=self._name)
            self.renewals += 1
            return await self._renewer.renew_many(leases, ttl_s)
        except StorageError:
            log.warning("lease_lane_store_unavailable", lane=self._name, leases=len(leases))
            await self._drop_renewer()
            raise

    async def _drop_renewer(self) -> None:
        renewer, self._renewer = self._renewer, None
        if renewer is not None:
            try:
                await renewer.close()
            except StorageError:
                pass

    def _snapshot(self) -> list[Kept]:
        with self._lock:
            return list(self._kept)

    def _holds(self, kept: Kept) -> bool:
        with self._lock:
            return kept in self._kept

    def _lose(self, kept: Kept, why: str) -> None:
        with self._lock:
            if kept not in self._kept:
                return
            self._kept.discard(kept)
        log.warning("lease_given_up", lease=kept.lease.name, fence=kept.lease.token, reason=why)
        kept.report_lost()


class _Unknown:
    """A renewal that neither succeeded nor was refused (the store erred or was too slow)."""


UNKNOWN = _Unknown()
