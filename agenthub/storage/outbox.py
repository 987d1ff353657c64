"""The outbox: proactive sends that only one instance of a deployment can make (the holder of a WeCom AI bot's long
connection). Another instance stores the send; the holder claims it, delivers it and records the outcome, which the
sender waits for. A row is claimed once, so it is delivered at most once even when the holder changes mid-drain."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

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
