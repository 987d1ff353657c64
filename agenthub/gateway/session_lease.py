"""Session leases: an instance runs a session's turns, queued commands and holds only while it holds the lease
`session:<agent:channel:chat_id>`. Gained: the store is fenced with the lease's token and the cached history is
reloaded when another instance may have written it. Held: renewed a sixth of `ttl_s` after each grant, by one task
for every held lease, in one request to the store (an instance busy with hundreds of sessions sends one renewal, not
hundreds queued behind each other). Lost: the running turn is cancelled. Once the session has no more local work:
kept (idle) while the store can ask its holder for it (`LeaseSignals`: PostgreSQL), so the next turn here takes no
round trip for it, and released the moment another instance asks, after `keep_idle_s` unused, or at close. Only a
session that stays here is kept: its last claim found that nobody else wrote it since this instance's previous hold
(or that no instance ever held it: a new session), nobody asked for it since, and the sessions of that kind kept here
mostly came back here (`KeepJudges`; before the first verdict: while no other instance is alive); any other (one
that moves between instances: waiting to be asked would put a hand-over in front of each of its turns) is released
at once (before its reply goes out: the next message, sent on the reply, finds it free wherever it lands): in the
statement of its turn's answer where the store can (`let_go_riding`, decided before that append), else after the
turn (`release_settled`), as is every lease over a store that cannot ask. A kept session whose next message goes to
another instance costs one hand-over (asked, let go, claimed again); after it, the session is released at once
wherever it moves; an instance whose kept sessions of a kind mostly move on (a round-robin balancer: a chat's turn
lands where its last one did a third of the time) stops keeping them, and one that starts among others keeps none
but its probes until they come back. Files mode takes none: one instance writes a data directory (its lock), so
every session lease would be granted at once, and the local mutex is all it needs."""

from __future__ import annotations

import asyncio
import contextvars
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog

from agenthub.clock import sleep_until
from agenthub.errors import SessionBusyError, StorageError
from agenthub.gateway.keep_judge import KeepJudges
from agenthub.session.history import SessionHistory
from agenthub.session_keys import SessionKey
from agenthub.storage.lease import (
    FREED,
    WANTED,
    AppendsLettingGo,
    Lease,
    LetGoRide,
    SessionClaim,
    SessionClaims,
    renew_all,
    renewal_due,
)
from agenthub.storage.lease_lane import Kept, LaneRenewals, RenewalLane
from agenthub.storage.ports import LeaseSignals, LiveHolders, QuickLookup
from agenthub.storage.singleton import InstanceLeases
from agenthub.storage.store import FencedWriteError
from agenthub.storage.usage import ClaimRide

log = structlog.get_logger(__name__)

POLL_FIRST_S = 0.025
POLL_MAX_S = 0.25
"""While another instance holds a session, its lease is asked for again after 25 ms, doubling up to 250 ms."""
RETRY_FRACTION = 12
"""A renewal the store did not answer is tried again after `ttl_s / 12` (until the lease is given up)."""
STAYING_KEPT = 10_000
LET_GO_BEFORE_REPLY_S = 1.0
"""How long a moved turn's reply waits for its session's let-go (`release_settled`); a store slower than that (a
locked row, a cut connection) delays it no longer: the let-go goes on behind the reply, and the next message, if
it is refused meanwhile, asks and hears of the let-go."""
BATCH_FRACTION = 6
"""A renewal joins the batch being sent when it is due within `ttl_s / 6` (renewed a little early, the leases of
an instance fall into few batches instead of one request each)."""


def lease_name(key: SessionKey) -> str:
    return f"session:{key}"


@dataclass
class _Held:
    granted: Lease
    next_at: float
    """When its next renewal is due (by the instance's lease clock)."""
    failed: bool = False
    """Its last renewal got no answer (the store erred or was too slow): past its give-up time it is lost."""
    kept: Kept | None = None
    """The lease as the renewal lane keeps it (its newest grant), over a store that has one."""
    lane: RenewalLane | None = None
    riding: bool = False
    """Its release rides its turn's last append (`let_go_riding`): a loss is acted on once that is settled."""
    lost_riding: bool = False
    """The lane gave it up while it rode: lost, unless the ride released it (`_ride_settled`)."""

    @property
    def lease(self) -> Lease:
        kept = self.kept
        return self.granted if kept is None else kept.lease

    @lease.setter
    def lease(self, lease: Lease) -> None:
        self.granted = lease


class _Unknown:
    """A renewal that neither succeeded nor was refused (the store erred or was too slow)."""


UNKNOWN = _Unknown()


class SessionLeases:
    """The session leases this instance holds. `claim` (under the session's local mutex) takes one or waits for
    it; `release` gives it up once the session has no more local work; `on_lost(key)` is called when one could not
    be renewed in time (its running turn must stop: a standby may take the session at expiry)."""

    def __init__(
        self,
        leases: InstanceLeases,
        history: SessionHistory,
        *,
        on_lost: Callable[[SessionKey], None],
        keep_idle_s: float | None = None,
    ) -> None:
        """`keep_idle_s`: how long a lease is kept without local work (default: `ttl_s / 3`; 0: released at once)."""
        self._leases = leases
        self._history = history
        self._on_lost = on_lost
        self._margin_s = leases.ttl_s / 3
        """How long before its expiry an unrenewed lease is given up: what the cancelled turn has to stop."""
        self._held: dict[SessionKey, _Held] = {}
        self._lost: set[SessionKey] = set()
        self._releasing: dict[SessionKey, asyncio.Task[None]] = {}
        self._renewer: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        store = leases.store
        self._lanes = store if isinstance(store, LaneRenewals) else None
        """Its renewal lane renews the held leases on a thread of its own (PostgreSQL): a starved loop does not let
        them lapse."""
        self._signals = store if isinstance(store, LeaseSignals) else None
        claims = history.store
        self._claims = claims if isinstance(claims, SessionClaims) and claims.claims_with(store) else None
        """The history's store takes the lease and fences the session in one request (PostgreSQL)."""
        self._rides = self._claims is not None and isinstance(claims, AppendsLettingGo)
        """A session let go at the end of its turn is released in the statement of its answer (`let_go_riding`)."""
        default_idle_s = leases.ttl_s / 3  # bounds the sessions a crashed instance keeps (until their expiry)
        self._keep_idle_s = 0.0 if self._signals is None else (default_idle_s if keep_idle_s is None else keep_idle_s)
        self._idle: dict[SessionKey, asyncio.TimerHandle] = {}
        """The held leases without local work, each with the timer that releases it."""
        self._wanted: set[SessionKey] = set()
        """Held leases another instance asked for: released as soon as their local work ends."""
        self._names: dict[str, SessionKey] = {}
        self._freed: dict[str, asyncio.Event] = {}
        """Per lease name this instance waits for: set when its holder releases it."""
        self._listener: asyncio.Task[None] | None = None
        self._staying: OrderedDict[SessionKey, None] = OrderedDict()
        """Sessions whose last claim found nobody else wrote them since this instance's previous hold, or that no
        instance held before (the newest `STAYING_KEPT`): only these are kept idle; one asked for (or taken from
        another instance) leaves it."""
        holders = store if isinstance(store, LiveHolders) and self._signals is not None else None
        self._judges = KeepJudges(holders, leases.holder, leases.ttl_s)
        """Whether the sessions kept here after a turn come back here: new ones (after their first turn), and those
        whose turn found them as this instance left them (behind a round-robin balancer a chat's turn lands where
        its last one did a third of the time: kept, its next one mostly costs a hand-over)."""
        self.shared = not isinstance(history.store, QuickLookup)
        """The histories are written by several instances (PostgreSQL), so sessions are leased; False for a store
        only this instance writes (the files under the data-dir lock, memory)."""

    def holds(self, key: SessionKey) -> bool:
        return key in self._held

    async def claim_within(self, key: SessionKey, limit_s: float) -> None:
        """`claim`, waiting at most `limit_s` for another instance to let the session go (SessionBusyError)."""
        try:
            async with asyncio.timeout(limit_s):
                await self.claim(key)
        except TimeoutError:
            raise SessionBusyError(f"session {key} is held by another instance") from None

    def claims_in_one(self, key: SessionKey) -> bool:
        """Whether a `claim` of `key` now would be one request of a store that claims in one (`SessionClaims`):
        something else can ride in it (`ride`)."""
        return self._claims is not None and key not in self._held

    async def claim(self, key: SessionKey, *, wait: bool = True, ride: ClaimRide | None = None) -> None:
        """Hold `key`'s lease: nothing to do while this instance holds it; otherwise acquire it, polling while
        another instance holds it (`wait=False`: SessionBusyError at once instead). On gain the store is fenced
        with its token and, if another instance may have written the session since, the cached copy dropped.
        `ride`: a budget reservation made in the claim's request when the store claims in one (`claims_in_one`)."""
        try:
            await self._claim(key, wait=wait, ride=ride)
        finally:
            if ride is not None:
                ride.done()  # made in the claim's first request, or not at all

    async def _claim(self, key: SessionKey, *, wait: bool, ride: ClaimRide | None) -> None:
        if not self.shared:
            return
        if key in self._held:
            idle = self._idle.pop(key, None)
            if idle is not None:
                idle.cancel()
            self._judges.judge(key, stayed=True)
            return
        releasing = self._releasing.get(key)
        if releasing is not None:  # our own release of it still in flight: it must not expire the new grant
            await asyncio.shield(releasing)
        lease, asked, moved, new = await self._acquire(key, wait=wait, ride=ride)
        try:
            if moved is None:
                moved = await self._history.store.fence(key, lease.token)
            if moved:
                await self._history.reload(key)
            await self._judges.first_answer()  # the first sessions after a start judged by who is alive
            judge = self._judges.of(new=new)
            if asked or (moved and not new) or not judge.keeps():
                self._staying.pop(key, None)
            else:
                self._stays(key)
                judge.kept(key)
        except BaseException:
            self._start_release(key, _Held(lease, _renewal_due(lease, self._leases.ttl_s)))
            raise
        held = self._held[key] = _Held(lease, _renewal_due(lease, self._leases.ttl_s))
        self._names[lease.name] = key
        self._lost.discard(key)
        self._history.lease_held(key, True)
        if self._lanes is not None:
            held.lane = self._lanes.renewal_lane()
            held.kept = held.lane.keep(lease, self._leases.ttl_s, on_lost=lambda: self._kept_lost(key, held))
        else:
            self._wake_renewer()

    def start(self) -> None:
        """Start asking who is alive (the gateway's start, on its loop): its first sessions are judged by the answer
        (`KeepJudges`); a claim without it starts it itself. Stopped by `close`."""
        self._judges.watch()

    @property
    def keeps_new_sessions(self) -> bool:
        """Whether new sessions are kept after their first turn now (besides the probes)."""
        return self._judges.new.keeping

    @property
    def keeps_returning_sessions(self) -> bool:
        """Whether sessions whose turn found them as this instance left them are kept after it now (besides the
        probes)."""
        return self._judges.returning.keeping

    @property
    def peers_asked(self) -> int:
        """How many times the store told who is alive (`KeepJudges`: before the first verdicts)."""
        return self._judges.asked

    def _stays(self, key: SessionKey) -> None:
        self._staying[key] = None
        self._staying.move_to_end(key)
        if len(self._staying) > STAYING_KEPT:
            self._staying.popitem(last=False)

    async def _acquire(
        self, key: SessionKey, *, wait: bool, ride: ClaimRide | None = None
    ) -> tuple[Lease, bool, bool | None, bool]:
        """The lease, whether another instance had to be asked for it first, whether the session may have moved
        (None: not fenced yet; a store that claims in one request fences with the grant), and whether no instance
        held it before (only such a store tells: `SessionClaim.new`). While another
        instance holds it, that one is asked for it (`LeaseSignals`) and the request repeated once it is freed,
        or after a poll interval (25 ms doubling up to 250 ms)."""
        name = lease_name(key)
        try:
            return await self._acquiring(key, name, wait=wait, ride=ride)
        finally:  # granted, refused, failed or cancelled: nothing waits for its release any more
            self._freed.pop(name, None)

    async def _acquiring(
        self, key: SessionKey, name: str, *, wait: bool, ride: ClaimRide | None
    ) -> tuple[Lease, bool, bool | None, bool]:
        leases, delay = self._leases, POLL_FIRST_S
        signals, asked = self._signals, False
        if signals is not None:
            self._listen()
            self._judges.watch()
        while True:
            if signals is not None:
                freed = self._freed.get(name)
                if freed is None:  # made only when missing: an Event a claim costs microseconds
                    freed = self._freed[name] = asyncio.Event()
                freed.clear()
            sent_at = leases.clock()
            if self._claims is not None:
                if ride is not None:  # only in the first request: a session held elsewhere may take long
                    claim = await self._claim_riding(key, name, ride)
                    ride = None
                else:
                    claim = await self._claims.claim(key, name, leases.holder, leases.ttl_s)
                if claim is not None:
                    granted = Lease(name, leases.holder, claim.token, sent_at + leases.ttl_s)
                    return self._claimed(key, granted, claim, asked)
                lease = None
            elif signals is not None:
                lease = await signals.acquire_or_ask(name, leases.holder, leases.ttl_s)
            else:
                lease = await leases.store.acquire(name, leases.holder, leases.ttl_s)
            if lease is not None:
                return lease, asked, None, False
            asked = True
            if not wait:
                raise SessionBusyError(f"session {key} is held by another instance")
            await self._freed_or_after(name, delay)
            delay = min(delay * 2, POLL_MAX_S)

    async def _claim_riding(self, key: SessionKey, name: str, ride: ClaimRide) -> SessionClaim | None:
        """The claim with `ride` in it; should that request fail, the claim alone (a budget check is never why a
        turn fails: it asks the store itself then, and a reservation the ride may have made is released)."""
        assert self._claims is not None
        leases = self._leases
        try:
            return await self._claims.claim(key, name, leases.holder, leases.ttl_s, ride=ride)
        except StorageError as e:
            log.warning("budget_ride_failed", session_key=str(key), error=str(e))
        finally:
            ride.done()
        return await self._claims.claim(key, name, leases.holder, leases.ttl_s)

    def _claimed(
        self, key: SessionKey, lease: Lease, claim: SessionClaim, asked: bool
    ) -> tuple[Lease, bool, bool, bool]:
        if claim.fenced_out:  # a newer token fenced the session already: nothing may be written under this one
            self._start_release(key, _Held(lease, _renewal_due(lease, self._leases.ttl_s)))
            raise FencedWriteError()
        return lease, asked, claim.moved, claim.new

    async def _freed_or_after(self, name: str, delay: float) -> None:
        freed = self._freed.get(name)
        if freed is None:
            await asyncio.sleep(delay)
            return
        try:
            async with asyncio.timeout(delay):
                await freed.wait()
        except TimeoutError:
            pass
        finally:
            self._freed.pop(name, None)

    def release(self, key: SessionKey) -> None:
        """The session has no more local work: over a store that can ask its holder (`LeaseSignals`) the lease is
        kept, idle, until another instance asks for it or `keep_idle_s` has passed; otherwise `release_now`."""
        if not self.shared:
            return
        if key in self._held and self._kept_idle(key):
            if key not in self._idle:
                loop = asyncio.get_running_loop()
                self._idle[key] = loop.call_later(self._keep_idle_s, self.release_now, key)
            return
        self.release_now(key)

    def _kept_idle(self, key: SessionKey) -> bool:
        """Whether `release` keeps the held lease of `key` idle now rather than letting it go."""
        return key not in self._wanted and key in self._staying and self._keep_idle_s > 0

    def let_go_riding(self, key: SessionKey) -> LetGoRide | None:
        """The lease of a session that `release` would let go at once now, to be released in the statement of its
        turn's last append (a store that can: `AppendsLettingGo`); None when it would be kept idle, is not held, or
        is let go the usual way. The lane keeps renewing it while it rides (an append held up past the ttl keeps the
        session); a loss the lane reports meanwhile (or a renewal refused once the ride released it) is acted on
        when the ride is settled: released, the session is let go as by `release_now`, with no statement of its own;
        not (the append failed, or landed without the release), it stays held, lost if the lane lost it, and
        `release` lets it go."""
        held = self._held.get(key)
        if not self._rides or held is None or held.riding or held.lane is None or self._kept_idle(key):
            return None
        held.riding = True
        return LetGoRide(held.lease, lambda released: self._ride_settled(key, held, released))

    def _ride_settled(self, key: SessionKey, held: _Held, released: bool) -> None:
        held.riding = False
        if self._held.get(key) is not held:  # let go (or lost) meanwhile, the usual way
            return
        if released:
            self._unkeep(held)
            self._forget(key)
            del self._held[key]
            self._history.lease_held(key, False)
            return
        if held.lost_riding:
            self._lose(key, held)

    async def release_settled(self, key: SessionKey) -> None:
        """`release`, and when that lets the lease go at once, until the store has it back or
        `LET_GO_BEFORE_REPLY_S` has passed (the let-go then goes on in the background; a failed one is logged: the
        lease then expires by itself); a lease kept idle returns at once."""
        self.release(key)
        releasing = self._releasing.get(key)
        if releasing is not None:
            await asyncio.wait([releasing], timeout=LET_GO_BEFORE_REPLY_S)

    def release_now(self, key: SessionKey) -> None:
        """Give the session up: its writes carry no token from now on, and the lease is released in the
        background (a later `claim` of it waits for that first)."""
        if not self.shared:
            return
        self._forget(key)
        held = self._held.pop(key, None)
        if held is not None:
            self._unkeep(held)
        if held is not None or key in self._lost:
            self._lost.discard(key)
            self._start_release(key, held)

    def _forget(self, key: SessionKey) -> None:
        """Drop what is kept about a held lease besides the lease itself (it is being released or was lost)."""
        idle = self._idle.pop(key, None)
        if idle is not None:
            idle.cancel()
        self._wanted.discard(key)
        self._judges.forget(key)  # let go unasked (idle too long, or closing): no verdict
        self._names.pop(lease_name(key), None)

    def _listen(self) -> None:
        if self._signals is not None and (self._listener is None or self._listener.done()):
            listen = self._signals.listen(self._signal)
            self._listener = asyncio.create_task(listen, name="session-lease-signals", context=contextvars.Context())

    def _signal(self, kind: str, name: str) -> None:
        """A lease was freed (a claim waiting for it tries again now) or is wanted by another instance (an idle
        one is released now, a busy one once its local work ends)."""
        if kind == FREED:
            freed = self._freed.get(name)
            if freed is not None:
                freed.set()
            return
        key = self._names.get(name)
        if kind != WANTED or key is None or key not in self._held:
            return
        self._staying.pop(key, None)
        self._judges.judge(key, stayed=False)
        if key in self._idle:
            log.debug("session_lease_handed_over", session_key=str(key))
            self.release_now(key)
        else:
            self._wanted.add(key)

    def _start_release(self, key: SessionKey, held: _Held | None) -> None:
        task = asyncio.create_task(self._release(key, held), name=f"session-release:{key}")
        self._releasing[key] = task
        task.add_done_callback(lambda done: self._release_done(key, done))

    def _release_done(self, key: SessionKey, task: asyncio.Task[None]) -> None:
        if self._releasing.get(key) is task:
            del self._releasing[key]

    async def _release(self, key: SessionKey, held: _Held | None) -> None:
        try:
            if held is not None:
                await self._history.flush(key)  # the meta written behind goes under our token, not after it
            self._history.lease_held(key, False)
            if held is not None and self._claims is not None:
                await self._claims.let_go(key, held.lease)  # the meta written behind and the release together
                return
            await self._history.store.fence(key, None)
            if held is not None:
                await self._leases.store.release(held.lease)
        except StorageError as e:  # the lease then expires by itself
            log.warning("session_lease_release_failed", session_key=str(key), error=str(e))

    async def close(self) -> None:
        """Release every held lease and wait for the releases (the gateway's shutdown, after its last turn)."""
        for key in list(self._held):
            self.release_now(key)
        if self._releasing:
            await asyncio.wait(list(self._releasing.values()))
        for task in (self._renewer, self._listener):
            if task is not None:
                task.cancel()
                await asyncio.wait([task])
        self._renewer = self._listener = None
        await self._judges.close()

    def _give_up_at(self, held: _Held) -> float:
        return held.lease.expires_at - self._margin_s

    def _wake_renewer(self) -> None:
        if self._renewer is None or self._renewer.done():
            renewer = self._renew_held()  # its own context: its log lines carry no turn's ids
            self._renewer = asyncio.create_task(renewer, name="session-lease-renewer", context=contextvars.Context())
            self._renewer.add_done_callback(_renewer_ended)
        else:
            self._wake.set()

    async def _renew_held(self) -> None:
        """Until no lease is held: renew every lease due (a sixth of the ttl after its grant, and those due soon)
        in one request; a lease whose renewal got no answer `ttl_s / 3` before it expires is lost, one the store
        refused at once. One this task reached after its give-up time (the loop was busy) is still renewed: the
        store grants that only while no other instance can have it."""
        clock, ttl_s = self._leases.clock, self._leases.ttl_s
        while self._held:
            now = clock()
            for key, held in list(self._held.items()):
                if now >= held.lease.expires_at or (held.failed and now >= self._give_up_at(held)):
                    self._lose(key, held)
            if not self._held:
                return
            soonest = min(min(h.next_at, self._give_up_at(h)) for h in self._held.values())
            if soonest > now:
                self._wake.clear()
                await _first_of(sleep_until(clock, soonest), self._wake.wait())
                continue
            batch = [(k, h) for k, h in self._held.items() if h.next_at <= now + ttl_s / BATCH_FRACTION]
            results = await self._renew_batch(batch)
            retry_at = clock() + ttl_s / RETRY_FRACTION
            for (key, held), renewed in zip(batch, results, strict=True):
                if self._held.get(key) is not held:  # released (or lost) while the renewal was out
                    continue
                if isinstance(renewed, Lease):
                    held.lease, held.next_at, held.failed = renewed, _renewal_due(renewed, ttl_s), False
                elif renewed is None:
                    self._lose(key, held)
                else:
                    held.next_at, held.failed = retry_at, True

    async def _renew_batch(self, batch: list[tuple[SessionKey, _Held]]) -> list[Lease | _Unknown | None]:
        """The renewed leases, None for each the store refused (another instance has it), UNKNOWN for all when
        the store erred. While the store has not answered, each lease is lost at its own give-up time (the others
        still wait for the answer); the request is abandoned once all are."""
        store, clock, ttl_s = self._leases.store, self._leases.clock, self._leases.ttl_s
        leases = [held.lease for _, held in batch]
        started = clock()  # one this renewer reached late (a busy loop) has until its expiry, not its give-up time
        limits = {key: g if started < (g := self._give_up_at(h)) else h.lease.expires_at for key, h in batch}
        attempt: asyncio.Task[list[Lease | None]] = asyncio.create_task(renew_all(store, leases, ttl_s))
        try:
            while not attempt.done():
                waiting = [(key, held) for key, held in batch if self._held.get(key) is held]
                if not waiting:
                    break
                deadline = min(limits[key] for key, _ in waiting)
                timer: asyncio.Task[None] = asyncio.create_task(sleep_until(clock, deadline))
                try:
                    await asyncio.wait({attempt, timer}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    timer.cancel()
                now = clock()
                for key, held in waiting if not attempt.done() else []:
                    if now >= limits[key]:
                        log.warning("session_lease_store_too_slow", lease=held.lease.name)
                        self._lose(key, held)
        finally:
            if not attempt.done():
                attempt.cancel()
                await asyncio.wait([attempt])
        unknown: list[Lease | _Unknown | None] = [UNKNOWN] * len(batch)
        if attempt.cancelled():
            return unknown
        try:
            return list(attempt.result())
        except StorageError:
            log.warning("session_lease_store_unavailable", leases=len(batch))
            return unknown

    def _kept_lost(self, key: SessionKey, held: _Held) -> None:
        """The lane gave `held` up (on this loop): lost, unless it was released meanwhile."""
        if held.riding:  # a renewal refused after the ride released it is no loss: told once the ride is settled
            held.lost_riding = True
            return
        if self._held.get(key) is held:
            self._lose(key, held)

    def _unkeep(self, held: _Held) -> None:
        """The lane stops renewing `held` (released or lost)."""
        if held.kept is not None and held.lane is not None:
            held.lane.drop(held.kept)

    def _lose(self, key: SessionKey, held: _Held) -> None:
        if self._held.get(key) is held:
            del self._held[key]
            self._unkeep(held)
            self._forget(key)
            self._lost.add(key)  # its token stays on the store's writes: a late one is refused
            self._history.lease_held(key, False)
        log.warning("session_lease_lost", session_key=str(key), fence=held.lease.token)
        self._on_lost(key)


async def _first_of(*waits: Coroutine[Any, Any, Any]) -> None:
    """Return once the first of `waits` is done; the others are cancelled."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)


def _renewal_due(lease: Lease, ttl_s: float) -> float:
    """A sixth of the ttl after the grant (at once for a grant that arrived late): a loaded instance or store has
    half the ttl, not a third, to get the renewal through before the lease is given up."""
    return min(renewal_due(lease, ttl_s), lease.expires_at - ttl_s * 5 / 6)


def _renewer_ended(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and (error := task.exception()) is not None:
        log.error("session_lease_renewer_failed", error_type=type(error).__name__, exc_info=error)
