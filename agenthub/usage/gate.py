"""`BudgetGate`: before a turn (or a scheduled prompt) the sender's, chat's and agent's budgets are checked and an
estimate is reserved; the reservation goes once the turn's real usage is stored (design §15)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from zoneinfo import ZoneInfo

import structlog

from agenthub import i18n
from agenthub.agent.definition import AgentDefinition
from agenthub.clock import Clock
from agenthub.config import BudgetLimits, BudgetSettings
from agenthub.errors import StorageError
from agenthub.messages import InboundMessage
from agenthub.storage.usage import Claim, Scope, Standing, UsageStore
from agenthub.usage.periods import day_of, period_key, resets_at
from agenthub.usage.recorder import UsageRecorder

log = structlog.get_logger(__name__)

RESERVATION_GRACE_S = 60.0
"""A reservation outlives the turn's lock timeout by this much; then it lapses (its instance died)."""
LIMIT_FIELDS = ("user_day", "user_month", "chat_day", "chat_month", "agent_day", "agent_month")


def limits_for(budgets: BudgetSettings, agent: AgentDefinition) -> BudgetLimits:
    """`[budgets]` with the agent's `agent.json` "budgets" laid over it."""
    overrides = agent.config.budgets.model_dump(exclude_none=True)
    return BudgetLimits(**{**budgets.model_dump(exclude={"exempt"}), **overrides})


def claims_for(limits: BudgetLimits, agent: str, message: InboundMessage) -> list[Claim]:
    """The scopes with a limit: the sender (per channel), the chat (per channel), the agent."""
    scopes = (
        (Scope("user", message.channel, message.sender_id), limits.user_day, limits.user_month),
        (Scope("chat", message.channel, message.chat_id), limits.chat_day, limits.chat_month),
        (Scope("agent", "", agent), limits.agent_day, limits.agent_month),
    )
    return [Claim(scope, day, month) for scope, day, month in scopes if (day or month) and scope.ident]


@dataclass
class Admission:
    """A turn let through: the reservation to settle (None: nothing limits it), and notices to show first."""

    reservation_id: str | None = None
    notices: list[str] = field(default_factory=list)
    refused: Literal[False] = False


@dataclass(frozen=True)
class Refusal:
    """A turn refused: the limit it reached and the text (in the chat's locale) saying so."""

    standing: Standing
    text: str
    refused: Literal[True] = True


class BudgetGate:
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
        self._limits: dict[str, tuple[object, BudgetLimits]] = {}  # agent → (its config, its limits)

    def limits(self, agent: AgentDefinition) -> BudgetLimits:
        """The agent's limits, worked out once per loaded definition (a reload brings a new one)."""
        known = self._limits.get(agent.name)
        if known is None or known[0] is not agent.config:
            known = self._limits[agent.name] = (agent.config, limits_for(self.budgets, agent))
        return known[1]

    def applies(self, agent: AgentDefinition, message: InboundMessage) -> bool:
        """Whether any limit applies to a turn of `message` (no estimate, no store call otherwise)."""
        if f"{message.channel}:{message.sender_id}" in self.exempt:
            return False
        return bool(claims_for(self.limits(agent), agent.name, message))

    async def admit(
        self, agent: AgentDefinition, message: InboundMessage, estimate: int, locale: str, ttl_s: float
    ) -> Admission | Refusal:
        """Refused when a limit is reached by what was used plus what running turns reserved; else `estimate`
        tokens are reserved. A store that cannot answer lets the turn through (logged): budgets never stop a
        chat because the database blinked."""
        limits = self.limits(agent)
        claims = claims_for(limits, agent.name, message)
        if not claims or f"{message.channel}:{message.sender_id}" in self.exempt:
            return Admission()
        day = day_of(self.clock(), self.zone)
        try:
            reservation = await self.store.reserve(claims, day, estimate, ttl_s + RESERVATION_GRACE_S)
        except StorageError as e:
            log.warning("budget_check_unavailable", error=str(e))
            return Admission()
        if reservation.refused is not None:
            standing = reservation.refused
            self.recorder.refusals[standing.scope.kind] += 1
            log.info("budget_refused", scope=standing.scope.key, period=standing.period, limit=standing.limit)
            return Refusal(standing, self.refusal_text(standing, locale))
        admission = Admission(reservation.id)
        try:
            for standing in reservation.standings:
                if (standing.used + estimate) / standing.limit >= limits.warn_at:
                    await self._warn_once(standing, day, locale, admission)
        except BaseException:  # cancelled (or failed) before the caller holds the admission: give the tokens back
            if reservation.id is not None:
                self.recorder.release(reservation.id)
            raise
        return admission

    async def _warn_once(self, standing: Standing, day: str, locale: str, admission: Admission) -> None:
        try:
            first = await self.store.first_warning(standing.scope.key, period_key(standing.period, day))
        except StorageError:
            return
        if first:
            used = min(standing.used, standing.limit)
            admission.notices.append(
                i18n.text(
                    "budget.warning",
                    locale,
                    who=i18n.text(f"budget.scope.{standing.scope.kind}", locale),
                    period=i18n.text(f"budget.period.{standing.period}", locale),
                    percent=int(100 * used / standing.limit),
                    limit=standing.limit,
                    resets=self._resets(standing, locale),
                )
            )

    def refusal_text(self, standing: Standing, locale: str) -> str:
        return i18n.text(
            "budget.refused",
            locale,
            who=i18n.text(f"budget.scope.{standing.scope.kind}", locale),
            period=i18n.text(f"budget.period.{standing.period}", locale),
            limit=standing.limit,
            resets=self._resets(standing, locale),
        )

    def _resets(self, standing: Standing, locale: str) -> str:
        return f"{resets_at(standing.period, self.clock(), self.zone):%Y-%m-%d %H:%M} ({self.zone.key})"

    def settle(self, admission: Admission) -> None:
        """The turn ended (done, failed or cancelled): its reservation ends with the write of its real usage (the
        recorder's next one). A write that fails is retried; the reservation lapses at its expiry at the latest."""
        if admission.reservation_id is not None:
            self.recorder.release(admission.reservation_id)

    async def drain(self) -> None:
        """Wait until every settlement so far is written (tests; shutdown); `StorageError` if it cannot be."""
        await self.recorder.flush()
