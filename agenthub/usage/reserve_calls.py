"""`ReserveCalls`: the budget gate asks the store for the parts of a turn no open lease of its own admits."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from agenthub.storage.ports import UsageStore
from agenthub.storage.usage import Claim, Reservation, Standing, judge
from agenthub.usage.leases import LEASE_ADMIT_S, Grant, Lease, LeaseKey, Leases, lease_claims
from agenthub.usage.recorder import UsageRecorder

RESERVATION_GRACE_S = 60.0
"""A reservation outlives the turn's lock timeout by this much; then it lapses (its instance died)."""


class ReserveCalls:
    """What `BudgetGate` asks the store for a turn's missing parts, on the state it keeps (declared here)."""

    store: UsageStore
    recorder: UsageRecorder
    leases: Leases
    _asking: dict[LeaseKey, asyncio.Future[None]]
    """The parts a lease is being asked for, each with the future its other turns wait on."""

    def _take(self, parts: Sequence[LeaseKey], taken: dict[LeaseKey, Lease], estimate: int) -> dict[LeaseKey, Lease]:
        """`taken` and the parts not in it that this instance's open leases admit a turn of `estimate` from."""
        found = dict(taken)
        for part in parts:
            if part not in found and (lease := self.leases.take(part, estimate)) is not None:
                found[part] = lease
        return found

    def _give_back(self, leases: Iterable[Lease], estimate: int) -> None:
        for lease in leases:
            self.leases.give_back(lease, estimate)

    async def _reserve(
        self, missing: list[LeaseKey], taken: dict[LeaseKey, Lease], day: str, estimate: int, ttl_s: float
    ) -> tuple[Reservation, list[Lease]]:
        """The parts the turn could not take from an open lease, in one store call: asked for as new leases (one
        grant) when every one of them is worth asking, else reserved for this turn alone (near a limit); the
        leases `taken` are given back when the turn is refused (or the store fails).

        Leasing a chat's or an agent's scope: every turn of that chat (agent) on this instance draws from the
        instance's lease; another instance's turns are checked against it as reserved, so near that limit they may
        be refused early by at most one lease's unspent part for up to `LEASE_ADMIT_S` (no lease is granted unless
        it is at most `LEASE_SHARE` of what is left). Every scope still holds at most what the turns running in it
        may spend, so concurrent turns (of one instance or several) overspend a limit by at most one reservation."""
        if not missing:
            return Reservation(None), []
        claims = [c for part in missing for c in part.claims]
        try:
            if self._worth_asking(missing):
                granted, refused = await self._ask_lease(missing, claims, day, estimate, ttl_s)
                if refused is not None:  # a limit itself is reached: refused without a second call
                    self._give_back(taken.values(), estimate)
                    return refused, []
                if granted:
                    return Reservation(None), granted
            reservation = await self.store.reserve(
                claims, day, estimate, ttl_s + RESERVATION_GRACE_S, ignore=self.recorder.stored_releases()
            )
        except BaseException:
            self._give_back(taken.values(), estimate)
            raise
        if reservation.refused is not None:
            self._give_back(taken.values(), estimate)
        return reservation, []

    async def _ask_lease(
        self, missing: list[LeaseKey], claims: list[Claim], day: str, estimate: int, ttl_s: float
    ) -> tuple[list[Lease], Reservation | None]:
        """Leases of `LEASE_TURNS` (or more: `Leases.turns`) estimates for the `missing` parts (one grant), this
        turn the first of each;
        ([], None): none (near a limit: the parts near it go cold); ([], refusal): a limit is reached."""
        call = self._lease_call(claims, estimate * min(self.leases.turns(p) for p in missing), ttl_s)
        if call is None:
            return [], None
        asked, tokens, lease_ttl = call
        asking = asyncio.get_running_loop().create_future()
        for part in missing:
            self._asking[part] = asking
        try:
            reservation = await self.store.reserve(
                asked, day, tokens, lease_ttl, ignore=self.recorder.stored_releases()
            )
        finally:
            for part in missing:
                del self._asking[part]
            asking.set_result(None)
        return self._lease_answer(missing, claims, tokens, estimate, reservation)

    def _worth_asking(self, missing: list[LeaseKey]) -> bool:
        return all(self.leases.worth_asking(p) for p in missing)

    @staticmethod
    def _lease_call(claims: list[Claim], tokens: int, ttl_s: float) -> tuple[list[Claim], int, float] | None:
        """What a lease of `tokens` (`LEASE_TURNS`, or more: `Leases.turns`, estimates) for the parts of `claims` is
        asked with: the lowered claims, its tokens and time to live; None when no limit could ever allow it."""
        asked = lease_claims(claims, tokens)
        return None if asked is None else (asked, tokens, ttl_s + LEASE_ADMIT_S + RESERVATION_GRACE_S)

    def _lease_answer(
        self, missing: list[LeaseKey], claims: list[Claim], tokens: int, estimate: int, reservation: Reservation
    ) -> tuple[list[Lease], Reservation | None]:
        """The store's answer to a lease's call: the leases granted (the asking turn the first of each), or none
        (near a limit: the parts near it go cold), with the refusal when a limit itself is reached."""
        if reservation.id is not None:
            return self._granted(
                missing, _standings(claims, reservation.standings), reservation.id, tokens, estimate
            ), None
        near = {s.scope for s in reservation.standings if s.used >= s.limit}  # against the lowered limits
        for part in missing:
            if any(c.scope in near for c in part.claims):
                self.leases.refused(part)
        standings, refused = judge(claims, _used(reservation.standings))
        return [], (Reservation(None, standings, refused) if refused is not None else None)

    def _granted(
        self, missing: list[LeaseKey], standings: list[Standing], rid: str, tokens: int, estimate: int
    ) -> list[Lease]:
        """The leases of one grant (`rid`) for the `missing` parts, with `standings` against the real limits (one per
        limit set, in the claims' order); the asking turn the first of each."""
        parts, at = [], 0
        for part in missing:  # each part's standings: the next `part.limits` of them
            parts.append((part, standings[at : at + part.limits]))
            at += part.limits
        return self.leases.granted(Grant(rid, len(missing)), parts, tokens, estimate)


def _used(standings: list[Standing]) -> dict[str, tuple[int, int]]:
    """scope key → (day, month) used plus reserved, as the store reported them."""
    used: dict[str, tuple[int, int]] = {}
    for s in standings:
        day, month = used.get(s.scope.key, (0, 0))
        used[s.scope.key] = (s.used, month) if s.period == "day" else (day, s.used)
    return used


def _standings(claims: Sequence[Claim], lowered: list[Standing]) -> list[Standing]:
    """The standings against the real limits (a lease was asked with lowered ones): `lowered` as `judge` gave them,
    one per limit set in the claims' order (a lowered limit is set where the real one is), each with its real
    limit; in any other order, judged again."""
    real = [(c.scope, limit) for c in claims for limit in (c.day_limit, c.month_limit) if limit > 0]
    if len(real) != len(lowered) or any(s.scope is not r[0] for s, r in zip(lowered, real, strict=True)):
        return judge(claims, _used(lowered))[0]
    return [Standing(s.scope, s.period, limit, s.used) for s, (_, limit) in zip(lowered, real, strict=True)]
