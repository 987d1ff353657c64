"""`Ride`: a turn's budget check sent with its session's claim (PostgreSQL: one round trip for both)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from agenthub.storage.usage import Claim, ClaimRide, Reservation
from agenthub.usage.leases import Lease, LeaseKey


@dataclass(eq=False, slots=True)
class Ride:
    """The store call `BudgetGate.admit` would make for a turn (its `estimate`), worked out before the turn's
    session is claimed and made in the claim's request (`sent`), so a turn that claims its session (a new person,
    or one back after a while) pays no round trip of its own for its check.

    Its answer is taken in as soon as the claim's comes back (`BudgetGate.answered`): a lease granted becomes the
    instance's at once, this turn its first (`granted`), so other turns of its scopes, which wait for it meanwhile
    (`asking`), draw from it as from any; a limit reached is the turn's `refusal`; a reservation for the turn alone
    is its `reservation`. `admit` uses the answer when the turn's estimate is still `estimate` (a session without
    history; one that had a history estimates more): otherwise, or when the turn ends before it asks, `let_go`
    gives the lease's share back or releases the reservation, and the turn is checked as ever."""

    estimate: int
    day: str
    missing: list[LeaseKey]
    """The turn's parts no open lease had room for: what the call asked for."""
    claims: list[Claim]
    """Their claims, with the real limits."""
    lease: list[Claim] | None
    """The lowered claims a lease was asked with; None: a reservation for this turn alone was asked for."""
    tokens: int
    """What the call asked to reserve."""
    sent: ClaimRide
    asking: asyncio.Future[None] | None = None
    answered: bool = False
    granted: list[Lease] = field(default_factory=list)
    refusal: Reservation | None = None
    reservation: Reservation | None = None
    used: bool = False
