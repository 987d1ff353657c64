"""The outbox: proactive sends that only one instance of a deployment can make (the holder of a WeCom AI bot's long
connection). Another instance stores the send; the holder claims it, delivers it and records the outcome, which the
sender waits for. A row is claimed once, so it is delivered at most once even when the holder changes mid-drain."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

State = Literal["pending", "claimed", "sent", "failed"]

UNKNOWN_OUTCOME = "the instance holding the connection stopped while sending it: it may or may not have arrived"
"""The reason of a claimed row whose claimer never recorded an outcome (it died or lost the connection)."""


@dataclass(frozen=True)
class OutboxRow:
    """One send to make: `target` names the connection (its lease name), `payload` what to send over it."""

    row_id: int
    target: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class Outcome:
    """Where a row stands; `reason` (a fixed text, never an exception's) when it failed."""

    state: State
    reason: str | None = None

    @property
    def final(self) -> bool:
        return self.state in ("sent", "failed")


class Outbox(Protocol):
    async def put(self, target: str, payload: dict[str, Any]) -> int:
        """Store a send for `target`'s holder; its row id."""
        ...

    async def claim(self, target: str, holder: str, claim_s: float) -> OutboxRow | None:
        """The oldest pending row of `target`, now claimed by `holder` for `claim_s`; None when there is none."""
        ...

    async def finish(self, row_id: int, holder: str, reason: str | None) -> None:
        """Record the outcome of a row `holder` claimed: sent (`reason` None) or failed with `reason`."""
        ...

    async def outcome(self, row_id: int) -> Outcome | None:
        """Where the row stands; None when it is gone."""
        ...

    async def withdraw(self, row_id: int, reason: str) -> bool:
        """The sender gives up: a still pending row fails with `reason` (True); False once it was claimed."""
        ...

    async def expire_claims(self, target: str) -> int:
        """Claims of `target` past their time fail with `UNKNOWN_OUTCOME` (never sent again); how many."""
        ...

    async def discard(self, row_id: int) -> None:
        """The sender has read the final outcome: the row (and the text it holds) goes."""
        ...
