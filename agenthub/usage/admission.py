"""What a turn's budget check works from and answers: the limits and claims of a turn's shape, worked out once
(`Plan`), and the check's answer (`Admission`, `Refusal`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from agenthub.agent.definition import AgentDefinition
from agenthub.config import BudgetLimits, BudgetSettings
from agenthub.messages import InboundMessage
from agenthub.storage.usage import Claim, Scope, Standing
from agenthub.usage.leases import Lease, LeaseKey, lease_parts


def limits_for(budgets: BudgetSettings, agent: AgentDefinition) -> BudgetLimits:
    """`[budgets]` with the agent's `agent.json` "budgets" laid over it."""
    overrides = agent.config.budgets.model_dump(exclude_none=True)
    return BudgetLimits(**{**budgets.model_dump(exclude={"exempt"}), **overrides})


LIMIT_FIELDS = ("user_day", "user_month", "chat_day", "chat_month", "agent_day", "agent_month")
"""The limits of `BudgetLimits` (0: none)."""


def claims_for(
    limits: BudgetLimits,
    agent: str,
    message: InboundMessage,
    senders: Sequence[str] | None = None,
    agent_claim: Claim | None = None,
) -> list[Claim]:
    """The scopes with a limit: each sender (per channel; a joined turn's every sender, default the message's),
    the chat (per channel), the agent (`agent_claim`: the agent's, made before). Only those are made."""
    claims = []
    channel = message.channel
    if limits.user_day or limits.user_month:
        for p in dict.fromkeys(senders if senders is not None else (message.sender_id,)):
            if p:
                claims.append(Claim(Scope("user", channel, p), limits.user_day, limits.user_month))
    if (limits.chat_day or limits.chat_month) and message.chat_id:
        claims.append(Claim(Scope("chat", channel, message.chat_id), limits.chat_day, limits.chat_month))
    if (limits.agent_day or limits.agent_month) and agent:
        claims.append(agent_claim or Claim(Scope("agent", "", agent), limits.agent_day, limits.agent_month))
    return claims


@dataclass(slots=True)
class Plan:
    """What a turn of one shape (agent definition, channel, chat, senders) is checked against, worked out once:
    the senders not exempt, the claims (None: nothing limits it), and their lease parts of the last day asked."""

    config: object
    limits: BudgetLimits
    claims: list[Claim] | None
    several: bool
    day: str = ""
    parts: list[LeaseKey] = field(default_factory=list)

    def parts_of(self, day: str, shared: dict[Claim, LeaseKey] | None = None) -> list[LeaseKey]:
        """Its lease parts on `day` (`shared`: as `lease_parts`)."""
        if day != self.day:
            assert self.claims is not None
            self.day, self.parts = day, lease_parts(day, self.claims, shared)
        return self.parts


@dataclass
class Admission:
    """A turn let through: the reservation to settle (None: nothing limits it), and notices to show first."""

    reservation_id: str | None = None
    notices: list[str] = field(default_factory=list)
    refused: Literal[False] = False
    leases: list[Lease] = field(default_factory=list)
    """The leases of this instance it was admitted from (the parts of its scopes not in `reservation_id`)."""
    estimate: int = 0
    """What the turn was admitted for (a lease's turn that spends more takes the rest from the lease)."""


@dataclass(frozen=True)
class Refusal:
    """A turn refused: the limit it reached and the text (in the chat's locale) saying so."""

    standing: Standing
    text: str
    refused: Literal[True] = True
