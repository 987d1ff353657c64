"""Budget leases: an instance reserves several turns' worth of headroom in one store call and admits the turns of
the same scopes from it locally, so that busy scopes' turns do not each cost a round trip to the database.

A turn's scopes are leased in parts: its senders' own (`user`) scopes together, the chat's and the agent's each on
their own, so that every turn of that chat (agent) on this instance draws from the instance's one lease of it (see
`BudgetGate._reserve`). The parts a turn lacks are asked for in one store call, as one reservation (a `Grant`) that
is released once every part of it has ended; a part that stops admitting (spent, replaced, or at its time) ends the
others with it, so that what the grant holds in a scope never outlives that scope's lease. A lease is an ordinary
reservation (the store counts it against every scope it claims, for every instance) that is granted only when it
fits whole, with room to spare, in what is left of every limit; so what turns admitted from a lease spend never
reaches a limit, and the guarantee of per-turn reservations (overspend by at most one reservation) holds unchanged:
near a limit no lease is granted and every turn reserves for itself. A lease stops admitting after `LEASE_ADMIT_S`
(or once spent) and ends with the write of its last turn's usage."""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agenthub.storage.usage import Claim, Standing

LEASE_TURNS = 8
"""A lease holds this many estimates of the turn that asked for it..."""
LEASE_TURNS_MAX = 64
"""...or, after one of the same key was spent within its window (a busy chat, an agent many people talk to), twice
as many as that one held, up to this many."""
LEASE_SHARE = 0.5
"""...and is granted only when it is at most this share of what is left of each limit."""
LEASE_ADMIT_S = 30.0
"""A lease admits turns for this long after it was granted; then it ends once its turns have."""
INFINITE = 2**63
"""More than any limit (`Lease.warn_from` of a lease without standings)."""


class LeaseKey:
    """The day and the claims (scopes with their limits) a lease was granted for: only turns with the same take it.
    Hashed once: a turn looks its parts up several times, and a turn shape's parts are kept (`gate.Plan`)."""

    __slots__ = ("_hash", "claims", "day", "limits")

    def __init__(self, day: str, claims: tuple[Claim, ...]) -> None:
        self.day = day
        self.claims = claims
        limits = 0
        flat: list[object] = [day]
        for c in claims:  # a loop, no generators; hashed from the plain values (no dataclass `__hash__` per field)
            limits += (c.day_limit > 0) + (c.month_limit > 0)
            scope = c.scope
            flat += (scope.kind, scope.channel, scope.ident, c.day_limit, c.month_limit)
        self.limits = limits
        """How many standings its claims have (`judge`: one per limit set, in the claims' order)."""
        self._hash = hash(tuple(flat))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, LeaseKey):
            return NotImplemented
        return self._hash == other._hash and self.day == other.day and self.claims == other.claims

    def __repr__(self) -> str:
        return f"LeaseKey({self.day!r}, {self.claims!r})"


@dataclass(slots=True)
class Grant:
    """One store reservation (`id`) holding the leases of `parts` keys, asked for together; released once all
    have ended. Its leases were granted at once and stop admitting at once (`until`): then `Leases`' one timer ends
    those still open (`keyed`: each with its key)."""

    id: str
    parts: int = 1
    until: float = 0.0
    keyed: list[tuple[LeaseKey, Lease]] = field(default_factory=list, repr=False)


@dataclass(slots=True)
class Lease:
    """Headroom reserved in the store (`grant`); `committed`: the estimates of the turns it admitted, plus what the
    ended ones spent beyond them."""

    grant: Grant
    tokens: int
    admit_until: float
    standings: list[Standing]
    committed: int = 0
    running: int = 0
    open: bool = True
    warn_at: float = -1.0
    """The share of a limit `warn_from` was worked out for (-1: not yet)."""
    warn_from: int = 0
    """`committed` from which a turn from it crosses `warn_at` of one of its limits (`warns_from`)."""

    def warns_from(self, warn_at: float) -> int:
        """`committed` from which a turn admitted from it crosses `warn_at` of a limit of its `standings` (what
        its standing's used plus what its turns took reaches `warn_at` of the limit; worked out once)."""
        if warn_at != self.warn_at:
            self.warn_at = warn_at
            self.warn_from = min((math.ceil(warn_at * s.limit) - s.used for s in self.standings), default=INFINITE)
        return self.warn_from


def lease_claims(claims: Sequence[Claim], tokens: int) -> list[Claim] | None:
    """The claims a lease of `tokens` is asked with: each limit lowered so that the store grants it only when
    used + reserved + tokens / LEASE_SHARE stays within the real limit; None when no limit could ever allow it."""
    pad = int(tokens / LEASE_SHARE) - 1
    lowered = []
    for claim in claims:
        day = claim.day_limit - pad if claim.day_limit else 0
        month = claim.month_limit - pad if claim.month_limit else 0
        if (claim.day_limit and day <= 0) or (claim.month_limit and month <= 0):
            return None
        lowered.append(Claim(claim.scope, day, month))
    return lowered


def lease_parts(day: str, claims: Sequence[Claim], shared: dict[Claim, LeaseKey] | None = None) -> list[LeaseKey]:
    """A turn's claims in the parts they are leased in: its senders' own (`user`) scopes together, then the chat's
    and the agent's each alone (so that every turn of that chat, or agent, shares the instance's one lease).
    `shared`: the keys of chats' and agents' parts made before (of any day), reused for this day's (one key object
    per part: an open lease is found by identity, not compared field by field) and added to."""
    own: list[Claim] = []
    parts: list[LeaseKey] = []
    for c in claims:
        if c.scope.kind == "user":
            own.append(c)
            continue
        key = None if shared is None else shared.get(c)
        if key is None or key.day != day:
            key = LeaseKey(day, (c,))
            if shared is not None:
                shared[c] = key
        parts.append(key)
    return [LeaseKey(day, tuple(own)), *parts] if own else parts


class Leases:
    """The open leases of this instance, one per key; a lease that ended is released through `release` (the usage
    recorder's next write: after the rows of its turns, never before)."""

    def __init__(
        self,
        release: Callable[[str], None],
        monotonic: Callable[[], float] = time.monotonic,
        admit_s: float = LEASE_ADMIT_S,
    ) -> None:
        self._release = release
        self._monotonic = monotonic
        self.admit_s = admit_s
        """How long a lease admits turns (`LEASE_ADMIT_S`; tests shorter)."""
        self._open: dict[LeaseKey, Lease] = {}
        self._cold: dict[LeaseKey, float] = {}  # key → until when no lease is asked for (one was refused)
        self._turns: dict[LeaseKey, int] = {}  # key → estimates its next lease holds, when not `LEASE_TURNS`
        self._expiring: deque[Grant] = deque()  # grants whose leases may still admit, in the order they stop
        self._timer: asyncio.TimerHandle | None = None  # ends the first of `_expiring` (one for all: made lazily)
        self._timer_loop: asyncio.AbstractEventLoop | None = None
        self.granted_count = 0
        """Leases granted since start (tests; a figure for the logs)."""

    def take(self, key: LeaseKey, estimate: int) -> Lease | None:
        """Admit a turn of `estimate` tokens from the key's lease, if it has one with room; else None."""
        lease = self._open.get(key)
        if lease is None:
            return None
        if self._monotonic() >= lease.admit_until:
            self._turns.pop(key, None)  # not spent in its window: the next one is of the usual size
            self._end(key, lease)
            return None
        if lease.committed + estimate > lease.tokens:  # spent within its window: the next one is larger
            self._turns[key] = min(2 * self._turns.get(key, LEASE_TURNS), LEASE_TURNS_MAX)
            self._end(key, lease)
            return None
        lease.committed += estimate
        lease.running += 1
        return lease

    def has_room(self, key: LeaseKey, estimate: int) -> bool:
        """Whether `take` would admit a turn of `estimate` tokens now (nothing taken, nothing ended)."""
        lease = self._open.get(key)
        return (
            lease is not None and self._monotonic() < lease.admit_until and lease.committed + estimate <= lease.tokens
        )

    def without_room(self, keys: Sequence[LeaseKey], estimate: int) -> list[LeaseKey]:
        """The `keys` whose lease has no room for a turn of `estimate` tokens now (`has_room` of each, at once)."""
        now, found = self._monotonic(), []
        for key in keys:
            lease = self._open.get(key)
            if lease is None or now >= lease.admit_until or lease.committed + estimate > lease.tokens:
                found.append(key)
        return found

    def lease_turns(self, keys: Sequence[LeaseKey]) -> int:
        """How many estimates one lease for all of `keys` holds (the least of their `turns`); 0 when it is not worth
        asking for (one of them is cold: `worth_asking`, in the keys' order)."""
        turns = LEASE_TURNS_MAX
        for key in keys:
            if not self.worth_asking(key):
                return 0
            turns = min(turns, self._turns.get(key, LEASE_TURNS))
        return turns

    def worth_asking(self, key: LeaseKey) -> bool:
        """False for a while after the store refused a lease for `key` (near a limit: per-turn reservations)."""
        until = self._cold.get(key)
        if until is None:
            return True
        if self._monotonic() < until:
            return False
        del self._cold[key]
        return True

    def turns(self, key: LeaseKey) -> int:
        """How many estimates the key's next lease holds."""
        return self._turns.get(key, LEASE_TURNS)

    def refused(self, key: LeaseKey) -> None:
        self._cold[key] = self._monotonic() + LEASE_ADMIT_S
        self._turns.pop(key, None)

    def granted(
        self, grant: Grant, parts: Sequence[tuple[LeaseKey, list[Standing]]], tokens: int, estimate: int
    ) -> list[Lease]:
        """New leases of `tokens` for the keys of `parts` (with their standings), all of `grant` (an older one still
        open of a key ends); the turn that asked for them (`estimate`) is the first of each. They admit until
        `admit_s` from now, when the instance's one timer ends those still open (every grant admits as long:
        they stop in the order they were granted; a timer is scheduled only when none is)."""
        until = grant.until = self._monotonic() + self.admit_s
        leases, keyed = [], grant.keyed
        for key, standings in parts:
            older = self._open.get(key)
            if older is not None:
                self._end(key, older)
            lease = self._open[key] = Lease(grant, tokens, until, standings, estimate, 1)
            leases.append(lease)
            keyed.append((key, lease))
        self.granted_count += len(leases)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a synchronous caller): they end at their next use instead
            return leases
        self._expiring.append(grant)
        if self._timer is None or self._timer_loop is not loop:
            self._timer, self._timer_loop = loop.call_later(self.admit_s, self._expire), loop
        return leases

    def _expire(self) -> None:
        """The first grants' admitting time is up: their leases still open end; the timer goes on for the next."""
        self._timer = None
        now, expiring = self._monotonic(), self._expiring
        while expiring and expiring[0].until <= now:
            for key, lease in expiring.popleft().keyed:
                self._end(key, lease)
        if expiring:
            self._timer = asyncio.get_running_loop().call_later(expiring[0].until - now, self._expire)

    def settle(self, lease: Lease, overrun: int | None) -> None:
        """A turn admitted from `lease` ended, having spent `overrun` tokens beyond its estimate (None: unknown, so
        the lease admits no more)."""
        lease.committed = lease.tokens if overrun is None else lease.committed + overrun
        lease.running -= 1
        if not lease.open and lease.running == 0:
            self._ended(lease)

    def give_back(self, lease: Lease, estimate: int) -> None:
        """A turn taken from `lease` was refused after all (by a chat's or agent's limit): its estimate is free
        again."""
        lease.committed -= estimate
        self.settle(lease, 0)

    def end(self, key: LeaseKey, lease: Lease) -> None:
        """`lease` admits no more (it ends once its turns have); the key's next lease is of the size it would
        have been (unlike one that `take` found spent within its window)."""
        self._end(key, lease)

    def _end(self, key: LeaseKey, lease: Lease) -> None:
        if not lease.open:
            return
        lease.open = False
        if self._open.get(key) is lease:
            del self._open[key]
        if lease.running == 0:
            self._ended(lease)
        for part, other in lease.grant.keyed:  # its grant holds its tokens in every part's scopes until all parts
            self._end(part, other)  # end: the others end with it (a spent part's scope is not held on by idle ones)

    def _ended(self, lease: Lease) -> None:
        """`lease` admits no more and its turns ended (this happens once per lease): its grant is released with
        its last part."""
        lease.grant.parts -= 1
        if lease.grant.parts == 0:
            self._release(lease.grant.id)

    def close(self) -> None:
        """Shutdown: no more turns from any lease; the idle ones are released (with the recorder's last write)."""
        for key, lease in list(self._open.items()):
            self._end(key, lease)
        self._expiring.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
