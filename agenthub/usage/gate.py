"""`BudgetGate`: before a turn (or a scheduled prompt) the sender's, chat's and agent's budgets are checked and an
estimate is reserved; the reservation goes once the turn's real usage is stored (design §15)."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from zoneinfo import ZoneInfo

import structlog

from agenthub import i18n
from agenthub.agent.definition import AgentDefinition
from agenthub.clock import Clock
from agenthub.config import BudgetLimits, BudgetSettings
from agenthub.errors import StorageError
from agenthub.messages import SENDER_NAME, InboundMessage
from agenthub.storage.ports import RidingReserves, UsageStore
from agenthub.storage.usage import Claim, Reservation, Scope, Standing, judge, reservation_of, used_of
from agenthub.usage.admission import LIMIT_FIELDS, Admission, Plan, Refusal, claims_for, limits_for
from agenthub.usage.leases import Lease, LeaseKey, Leases
from agenthub.usage.meter import CpuMeter
from agenthub.usage.periods import day_of, period_key, resets_at
from agenthub.usage.recorder import UsageRecorder
from agenthub.usage.reserve_calls import RESERVATION_GRACE_S, ReserveCalls
from agenthub.usage.ride import Ride

log = structlog.get_logger(__name__)

PLANS_KEPT = 4096
"""How many turn shapes (agent, chat, senders) the gate keeps the claims of; more: it starts over."""


class BudgetGate(ReserveCalls):
    """The one seam between turns and budgets; nothing here knows about sessions or queues."""

    def __init__(
        self, budgets: BudgetSettings, store: UsageStore, recorder: UsageRecorder, zone: ZoneInfo, clock: Clock
    ) -> None:
        self.budgets = budgets
        self.store = store
        self.recorder = recorder
        self.zone = zone
        self.clock = clock
        self.exempt = frozenset(budgets.exempt)
        self._limits: dict[str, tuple[object, BudgetLimits, bool, Claim | None]] = {}
        """agent → (its config, its limits, whether any is set, its own claim: one object for all its plans)"""
        self._shared: dict[Claim, LeaseKey] = {}  # the chats' and agents' lease parts (`lease_parts`), of any plan
        self.leases = Leases(recorder.release)  # an ended lease is released with the writer's next write
        self._asking: dict[LeaseKey, asyncio.Future[None]] = {}
        self._plans: dict[tuple[str, str, str, tuple[str, ...]], Plan] = {}
        self._today = ("", 0.0, 0.0)  # the day, and the epoch seconds it starts and ends at
        self._warned: set[tuple[str, str]] = set()  # (scope key, period key) whose notice went out (this or any day)
        recorder.before_close.append(self.leases.close)
        self._riding = store if isinstance(store, RidingReserves) else None
        """The store, when a check can ride in a session's claim (asked once: a protocol's `isinstance` is slow)."""
        self.ridden = 0
        """Turns whose check was made in their session's claim and used (`Ride`; tests, a figure for the logs)."""
        self.cpu = CpuMeter()
        """The CPU time spent in `applies`, `admit` and `settle` (with their store calls and lease bookkeeping), and
        in what the caller measures with it (the turn's estimate): what budgets cost the turns."""

    @property
    def cpu_seconds(self) -> float:
        """All CPU time budgets cost so far: the gate's own (`cpu`) and the recorder's writes that only end
        reservations (a lease's or a turn's whose calls were written already)."""
        return self.cpu.seconds + self.recorder.release_cpu.seconds

    def limits(self, agent: AgentDefinition) -> BudgetLimits:
        """The agent's limits, worked out once per loaded definition (a reload brings a new one)."""
        return self._known(agent)[1]

    def _limited(self, agent: AgentDefinition) -> bool:
        """Whether the agent has any limit at all (per sender, chat or agent)."""
        return self._known(agent)[2]

    def _known(self, agent: AgentDefinition) -> tuple[object, BudgetLimits, bool, Claim | None]:
        known = self._limits.get(agent.name)
        if known is None or known[0] is not agent.config:
            limits = limits_for(self.budgets, agent)
            limited = any(getattr(limits, name) for name in LIMIT_FIELDS)
            own = None
            if (limits.agent_day or limits.agent_month) and agent.name:
                own = Claim(Scope("agent", "", agent.name), limits.agent_day, limits.agent_month)
            known = self._limits[agent.name] = (agent.config, limits, limited, own)
        return known

    @staticmethod
    def names_of(messages: Iterable[InboundMessage]) -> dict[str, str]:
        """Sender id → display name, of the messages whose channel gave one (`SENDER_NAME`)."""
        return {m.sender_id: n for m in messages if isinstance(n := m.metadata.get(SENDER_NAME), str) and n.strip()}

    def checked(self, message: InboundMessage, senders: Sequence[str] | None = None) -> list[str]:
        """The senders whose budgets a turn is checked against: the turn's (a joined turn's every sender,
        default the message's) that are not exempt; none: the turn is exempt."""
        people = senders if senders is not None else (message.sender_id,)
        if not self.exempt:
            return list(dict.fromkeys(people))
        return [p for p in dict.fromkeys(people) if f"{message.channel}:{p}" not in self.exempt]

    def applies(self, agent: AgentDefinition, message: InboundMessage, senders: Sequence[str] | None = None) -> bool:
        """Whether any limit applies to a turn of `message` (no estimate, no store call otherwise). An agent without
        any limit answers at once, nothing measured: budgets cost its turns nothing."""
        if not self._limited(agent):
            return False
        with self.cpu.measure():
            return self.plan(agent, message, senders).claims is not None

    def plan(self, agent: AgentDefinition, message: InboundMessage, senders: Sequence[str] | None = None) -> Plan:
        """The turn's `Plan`, from the ones kept (a reloaded definition, or a new shape, works it out anew)."""
        people = (message.sender_id,) if senders is None else tuple(senders)  # a person's limits are theirs alone
        key = (agent.name, message.channel, message.chat_id, people)
        plan = self._plans.get(key)
        if plan is None or plan.config is not agent.config:
            if len(self._plans) >= PLANS_KEPT:
                self._plans.clear()
                self._shared.clear()
            _, limits, _, own = self._known(agent)
            checked = self.checked(message, senders)
            claims = claims_for(limits, agent.name, message, checked, own) if checked else []
            several = len(dict.fromkeys(senders or ())) > 1
            plan = self._plans[key] = Plan(agent.config, limits, claims or None, several)
        return plan

    def today(self) -> str:
        """`YYYY-MM-DD` now in the configured zone (worked out again only when the clock leaves the day)."""
        now = self.clock()
        day, starts, ends = self._today
        if not starts <= now < ends:
            day = day_of(now, self.zone)
            ends = resets_at("day", now, self.zone).timestamp()
            starts = dt.datetime.combine(dt.date.fromisoformat(day), dt.time(), self.zone).timestamp()
            self._today = (day, starts, ends)
        return day

    async def admit(
        self,
        agent: AgentDefinition,
        message: InboundMessage,
        estimate: int,
        locale: str,
        ttl_s: float,
        senders: Sequence[str] | None = None,
        names: Mapping[str, str] | None = None,
        ride: Ride | None = None,
    ) -> Admission | Refusal:
        """Refused when a limit is reached by what was used plus what running turns reserved; else `estimate`
        tokens are reserved (in every scope: each sender's of a joined turn too). A store that cannot answer lets
        the turn through (logged): budgets never stop a chat because the database blinked. `names`: sender id →
        display name, where the channel gave one (a joined turn's refusal names the member, else by their id).
        `ride`: the turn's `ride`, sent with its session's claim (its answer used when it still fits, else let go)."""
        return await self.cpu.run(self._admit(agent, message, estimate, locale, ttl_s, senders, names, ride))

    def ride(
        self,
        agent: AgentDefinition,
        message: InboundMessage,
        estimate_of: Callable[[], int],
        ttl_s: float,
        senders: Sequence[str] | None = None,
    ) -> Ride | None:
        """The store call a turn of `estimate_of()` tokens would make now (as `_reserve` asks: a lease when worth
        asking, else a reservation for the turn alone), to be made in its session's claim (a store that can:
        `RidingReserves`); None when it would make none (nothing limits it, its leases have room) or another turn
        is asking for a lease of its scopes (it waits for that one's answer instead). Nothing is taken here; the
        estimate is worked out (and counted) only when a limit applies."""
        store = self._riding
        if store is None or not self._limited(agent):
            return None
        with self.cpu.measure():
            plan = self.plan(agent, message, senders)
            if plan.claims is None:
                return None
            estimate = estimate_of()
            day = self.today()
            missing = self.leases.without_room(plan.parts_of(day, self._shared), estimate)
            if not missing:
                return None
            claims: list[Claim] = []
            for part in missing:
                if part in self._asking:  # another turn asks for a lease of it: this one waits for that answer
                    return None
                claims += part.claims
            turns = self.leases.lease_turns(missing)  # 0: not worth asking (near a limit)
            call = self._lease_call(claims, estimate * turns, ttl_s) if turns else None
            lease = call is not None
            asked, tokens, ttl = call or (claims, estimate, ttl_s + RESERVATION_GRACE_S)
            sent = store.ride(asked, day, tokens, ttl, ignore=self.recorder.stored_releases())
            ride = Ride(estimate, day, missing, claims, asked if lease else None, tokens, sent)
            if lease:  # other turns of these scopes wait for its answer, as for `_ask_lease`'s
                ride.asking = asyncio.get_running_loop().create_future()
                for part in missing:
                    self._asking[part] = ride.asking
            sent.then = lambda: self.answered(ride)  # by the claim (`ClaimRide.done`)
            return ride

    def answered(self, ride: Ride) -> None:
        """The claim `ride` went with came back, or failed, or was not made (the session was held already): its
        answer taken in (a lease granted is the instance's from now on); the turns waiting for it go on."""
        if not ride.answered:
            with self.cpu.measure():
                self._answered(ride)

    def _answered(self, ride: Ride) -> None:
        ride.answered = True
        if ride.asking is not None:
            for part in ride.missing:
                if self._asking.get(part) is ride.asking:
                    del self._asking[part]
            ride.asking.set_result(None)
        rows = ride.sent.rows
        if rows is None:  # not made (or unknown: `let_go` releases its id)
            return
        sent, asked = ride.sent, ride.lease
        try:
            if asked is not None and (read := used_of(rows))[1]:  # granted: its standings judged at once (real limits)
                ride.granted = self._granted(
                    ride.missing, judge(ride.claims, read[0])[0], sent.id, ride.tokens, ride.estimate
                )
                return
            reservation = reservation_of(ride.claims if asked is None else asked, sent.id, rows)
        except StorageError as e:  # as a store call that fails: the turn's check asks the store itself
            log.warning("budget_check_unavailable", error=str(e))
            sent.rows = None  # the reservation it may have made is released (`let_go`)
            return
        if asked is None:
            ride.reservation = reservation
            return
        ride.granted, ride.refusal = self._lease_answer(
            ride.missing, ride.claims, ride.tokens, ride.estimate, reservation
        )

    def let_go(self, ride: Ride | None) -> None:
        """The turn is done with `ride` without using it (its estimate differs, or it ended before its check): the
        share of a lease it was granted goes back to the lease, a reservation it made is released."""
        if ride is not None and not ride.used:
            with self.cpu.measure():
                self._let_go(ride)

    def _let_go(self, ride: Ride) -> None:
        if not ride.answered:
            self._answered(ride)
        ride.used = True  # once
        self._give_back(ride.granted, ride.estimate)  # a lease it was granted stays the instance's
        made = ride.reservation is not None and ride.reservation.id is not None
        if ride.sent.sent and (ride.sent.rows is None or made):  # made, or perhaps made (no answer)
            self.recorder.release(ride.sent.id, unspent=True)

    async def _admit(
        self,
        agent: AgentDefinition,
        message: InboundMessage,
        estimate: int,
        locale: str,
        ttl_s: float,
        senders: Sequence[str] | None,
        names: Mapping[str, str] | None,
        ride: Ride | None = None,
    ) -> Admission | Refusal:
        plan = self.plan(agent, message, senders)
        if plan.claims is None:
            if ride is not None and not ride.used:
                self._let_go(ride)
            return Admission()
        limits = plan.limits
        named = dict(names or {}) if plan.several else None  # a joined turn: a sender's limit names them
        day = self.today()
        parts = plan.parts_of(day, self._shared)
        taken: dict[LeaseKey, Lease] = {}
        if ride is not None:
            if ride.answered and ride.estimate == estimate and ride.day == day:
                own, taken = self._ridden(ride, parts, estimate)
                if own is not None:
                    return await self._answer(own, taken, [], estimate, day, locale, named, limits.warn_at)
            if not ride.used:  # let go before the turn takes from leases
                self._let_go(ride)
                self._end_too_small(ride, estimate)
        taken = self._take(parts, taken, estimate)
        if len(taken) == len(parts):  # far from every limit: admitted from this instance's leases, no store call
            admission = Admission(None, leases=list(taken.values()), estimate=estimate)
            due = self._due(admission, [], limits.warn_at)
            return await self._warned_of(admission, due, day, locale, named) if due else admission
        try:
            # no await from the end of this loop to `_ask_lease` taking `_asking`: one turn asks for a part at a time
            while asking := next((self._asking[p] for p in parts if p not in taken and p in self._asking), None):
                await asyncio.shield(asking)  # another turn is asking for a lease of these scopes: its answer may
                taken = self._take(parts, taken, estimate)  # have room for this one too
        except BaseException:  # cancelled: the turn was never admitted
            self._give_back(taken.values(), estimate)
            raise
        missing = [p for p in parts if p not in taken]
        try:
            reservation, granted = await self._reserve(missing, taken, day, estimate, ttl_s)
        except StorageError as e:
            log.warning("budget_check_unavailable", error=str(e))
            return Admission()
        return await self._answer(reservation, taken, granted, estimate, day, locale, named, limits.warn_at)

    def _end_too_small(self, ride: Ride, estimate: int) -> None:
        """The leases `ride` was granted (sized for a session without history) that could never admit the turn's
        larger `estimate` end now, unspent, so that the parts' next leases are of the usual size (`Leases.take`
        would end them as spent within their window, sizing the next one up)."""
        if ride.granted:
            for part, lease in zip(ride.missing, ride.granted, strict=True):
                if estimate > lease.tokens:
                    self.leases.end(part, lease)

    def _ridden(
        self, ride: Ride, parts: list[LeaseKey], estimate: int
    ) -> tuple[Reservation | None, dict[LeaseKey, Lease]]:
        """What the turn has from its `ride` (answered, for this estimate): a refusal; or its own reservation, with
        the other parts taken from leases (each has room: nothing awaited since); or (None) the leases it was
        granted, the other parts still to take; (None, {}): nothing (no lease was granted near a limit; a part the
        reservation was made without has no lease with room now)."""
        own = ride.refusal or ride.reservation
        if ride.granted:
            taken = dict(zip(ride.missing, ride.granted, strict=True))
            own = None
        elif own is None:
            return None, {}
        elif own.refused is not None:
            taken = {}
        else:  # its own reservation, with every other part from a lease with room
            others = [p for p in parts if p not in ride.missing]
            if not all(self.leases.has_room(p, estimate) for p in others):
                return None, {}
            taken = self._take(others, {}, estimate)
        ride.used = True
        self.ridden += 1
        return own, taken

    async def _answer(
        self,
        reservation: Reservation,
        taken: dict[LeaseKey, Lease],
        granted: list[Lease],
        estimate: int,
        day: str,
        locale: str,
        named: Mapping[str, str] | None,
        warn_at: float,
    ) -> Admission | Refusal:
        """The turn refused (`reservation.refused`), or admitted with its reservation and leases."""
        if reservation.refused is not None:
            standing = reservation.refused
            self.recorder.refusals[standing.scope.kind] += 1
            log.info("budget_refused", scope=standing.scope.key, period=standing.period, limit=standing.limit)
            return Refusal(standing, self.refusal_text(standing, locale, named=named))
        admission = Admission(reservation.id, leases=[*taken.values(), *granted], estimate=estimate)
        due = [s for s in reservation.standings if s.used + estimate >= warn_at * s.limit]
        due = self._due(admission, due, warn_at)
        return await self._warned_of(admission, due, day, locale, named) if due else admission

    @staticmethod
    def _due(admission: Admission, due: list[Standing], warn_at: float) -> list[Standing]:
        """The limits `admission` crosses `warn_at` of: `due` (its own reservation's) and its leases'."""
        estimate = admission.estimate
        for lease in admission.leases:
            if lease.committed < lease.warns_from(warn_at):  # none of its limits near `warn_at` yet
                continue
            before = lease.committed - estimate  # what the lease's earlier turns took since it was granted
            due += [
                Standing(s.scope, s.period, s.limit, s.used + before)
                for s in lease.standings
                if s.used + before + estimate >= warn_at * s.limit
            ]
        return due

    async def _warned_of(
        self, admission: Admission, due: list[Standing], day: str, locale: str, named: Mapping[str, str] | None
    ) -> Admission:
        """`admission` with the notices of the limits `due` (`_due`) that were not noticed yet this period."""
        try:
            for standing in due:
                if (standing.scope.key, period_key(standing.period, day)) not in self._warned:
                    await self._warn_once(standing, day, locale, admission, named=named)
        except BaseException:  # cancelled (or failed) before the caller holds the admission: give the tokens back
            self.settle(admission, 0)  # nothing was spent yet
            raise
        return admission

    async def _warn_once(
        self, standing: Standing, day: str, locale: str, admission: Admission, *, named: Mapping[str, str] | None
    ) -> None:
        period = period_key(standing.period, day)
        try:
            first = await self.store.first_warning(standing.scope.key, period)
        except StorageError:
            return
        if len(self._warned) >= PLANS_KEPT:
            self._warned.clear()  # asked again: the store still answers once per period
        self._warned.add((standing.scope.key, period))  # noticed (here or by another instance): no more asking
        if first:
            used = min(standing.used, standing.limit)
            admission.notices.append(
                i18n.text(
                    "budget.warning",
                    locale,
                    who=self._who(standing, locale, named),
                    period=i18n.text(f"budget.period.{standing.period}", locale),
                    percent=int(100 * used / standing.limit),
                    limit=standing.limit,
                    resets=self._resets(standing, locale),
                )
            )

    def refusal_text(self, standing: Standing, locale: str, *, named: Mapping[str, str] | None = None) -> str:
        """The refusal in `locale`; `named` (sender id → display name; one missing: the id): the turn joined several
        senders' messages, so a sender's limit names them (`Alice Wang's daily budget`) instead of saying "your"."""
        return i18n.text(
            "budget.refused",
            locale,
            who=self._who(standing, locale, named),
            period=i18n.text(f"budget.period.{standing.period}", locale),
            limit=standing.limit,
            resets=self._resets(standing, locale),
        )

    @staticmethod
    def _who(standing: Standing, locale: str, named: Mapping[str, str] | None) -> str:
        if named is not None and standing.scope.kind == "user":
            who = standing.scope.ident
            return i18n.text("budget.scope.member", locale, sender=named.get(who) or who)
        return i18n.text(f"budget.scope.{standing.scope.kind}", locale)

    def _resets(self, standing: Standing, locale: str) -> str:
        return f"{resets_at(standing.period, self.clock(), self.zone):%Y-%m-%d %H:%M} ({self.zone.key})"

    def settle(self, admission: Admission, spent: int | None) -> None:
        """The turn ended (done, failed or cancelled): its reservation ends with the write of its real usage (the
        recorder's next one). A write that fails is retried; the reservation lapses at its expiry at the latest.
        A turn from a lease leaves it (which ends with its last turn once it admits no more), charging it what it
        spent beyond its estimate (`spent`: the turn's tokens; None, unknown, spends the lease: no more turns from
        it), so a lease's turns never spend more than the lease, however far they overrun their estimates."""
        with self.cpu.measure():
            self._settle(admission, spent)

    def _settle(self, admission: Admission, spent: int | None) -> None:
        leases, admission.leases = admission.leases, []
        for lease in leases:
            self.leases.settle(lease, None if spent is None else max(0, spent - admission.estimate))
        if admission.reservation_id is not None:
            self.recorder.release(admission.reservation_id)
            admission.reservation_id = None

    async def drain(self) -> None:
        """Wait until every settlement so far is written (tests; shutdown); `StorageError` if it cannot be."""
        await self.recorder.flush()
