"""Budget leases: an instance reserves several turns' worth of headroom in one store call and admits the turns of
the same scopes from it locally, so that busy scopes' turns do not each cost a round trip to the database.

A turn's scopes are leased in parts: its senders' own (`user`) scopes together, the chat's and the agent's each on
their own, so that every turn of that chat (agent) on this instance draws from the instance's one lease of it (see
`BudgetGate._reserve`). The parts a turn lacks are asked for in one store call, as one reservation (a `Grant`) that
is released once every part of it has ended. A lease is an ordinary reservation (the store counts it against every
scope it claims, for every instance) that is granted only when it fits whole, with room to spare, in what is left
of every limit; so what turns admitted from a lease spend never reaches a limit, and the guarantee of per-turn
reservations (overspend by at most one reservation) holds unchanged: near a limit no lease is granted and every
turn reserves for itself. A lease stops admitting after `LEASE_ADMIT_S` (or once spent) and ends with the write of
its last turn's usage."""

from __future__ import annotations

import asyncio
import time
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


class LeaseKey:
    """The day and the claims (scopes with their limits) a lease was granted for: only turns with the same take it.
    Hashed once: a turn looks its parts up several times, and a turn shape's parts are kept (`gate.Plan`)."""

    __slots__ = ("_hash", "claims", "day", "limits")

    def __init__(self, day: str, claims: tuple[Claim, ...]) -> None:
        self.day = day
        self.claims = claims
        self.limits = sum((c.day_limit > 0) + (c.month_limit > 0) for c in claims)
        """How many standings its claims have (`judge`: one per limit set, in the claims' order)."""
        self._hash = hash((day, claims))

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


@dataclass
class Grant:
    """One store reservation (`id`) holding the leases of `parts` keys, asked for together; released once all
    have ended. Its leases were granted at once and stop admitting at once: one timer (`timer`) ends those still
    open then; it is cancelled once none is (`open`: how many still admit)."""

    id: str
    parts: int = 1
    open: int = 0
    timer: asyncio.TimerHandle | None = field(default=None, repr=False)


@dataclass
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


def lease_parts(day: str, claims: Sequence[Claim]) -> list[LeaseKey]:
    """A turn's claims in the parts they are leased in: its senders' own (`user`) scopes together, then the chat's
    and the agent's each alone (so that every turn of that chat, or agent, shares the instance's one lease)."""
    own = tuple(c for c in claims if c.scope.kind == "user")
    parts: list[LeaseKey] = [LeaseKey(day, own)] if own else []
    return parts + [LeaseKey(day, (c,)) for c in claims if c.scope.kind != "user"]


class Leases:
    """The open leases of this instance, one per key; a lease that ended is released through `release` (the usage
    recorder's next write: after the rows of its turns, never before)."""

    def __init__(self, release: Callable[[str], None], monotonic: Callable[[], float] = time.monotonic) -> None:
        self._release = release
        self._monotonic = monotonic
        self._open: dict[LeaseKey, Lease] = {}
        self._cold: dict[LeaseKey, float] = {}  # key → until when no lease is asked for (one was refused)
        self._turns: dict[LeaseKey, int] = {}  # key → estimates its next lease holds, when not `LEASE_TURNS`
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
        `LEASE_ADMIT_S` from now, when one timer ends those still open."""
        until = self._monotonic() + LEASE_ADMIT_S
        leases = []
        for key, standings in parts:
            older = self._open.get(key)
            if older is not None:
                self._end(key, older)
            lease = self._open[key] = Lease(grant, tokens, until, standings, estimate, 1)
            leases.append(lease)
        self.granted_count += len(leases)
        grant.open += len(leases)
        try:
            grant.timer = asyncio.get_running_loop().call_later(LEASE_ADMIT_S, self._expire, parts, leases)
        except RuntimeError:  # no loop (a synchronous caller): they end at their next use instead
            grant.timer = None
        return leases

    def _expire(self, parts: Sequence[tuple[LeaseKey, list[Standing]]], leases: list[Lease]) -> None:
        """A grant's admitting time is up: its leases still open end."""
        for (key, _), lease in zip(parts, leases, strict=True):
            self._end(key, lease)

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
        grant = lease.grant
        grant.open -= 1
        if grant.open == 0 and grant.timer is not None:  # none of its leases admits any more
            grant.timer.cancel()
        if self._open.get(key) is lease:
            del self._open[key]
        if lease.running == 0:
            self._ended(lease)

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
