"""What channels keep: the outbox of sends (`Outbox`), seen message ids (`SeenIds`), per-member send counts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agenthub.storage.member_sends import Windows
    from agenthub.storage.outbox import OutboxRow, Outcome


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


class SeenIds(Protocol):
    """A durable TTL set of ids shared by a channel's credentials: `DedupStore`'s JSONL file (files) or
    `PostgresSeenIds` (postgres, shared by every instance)."""

    @property
    def ttl_s(self) -> float: ...

    def __len__(self) -> int: ...

    async def check_and_add(self, key: str) -> bool: ...

    async def forget(self, key: str) -> None:
        """Take `key` back (it was seen but the message was not kept): its next delivery is new, durably."""
        ...


class MemberSends(Protocol):
    """One sender's (a WeCom app's) sends per member in its sliding windows."""

    @property
    def windows(self) -> Windows: ...

    async def waits(self, member: str, count: int) -> list[float]:
        """The seconds from now until each of `count` further sends to `member` may go (nothing is counted)."""
        ...

    async def take(self, member: str) -> float:
        """Count one send to `member` now if every window has room for it, and return 0; otherwise count nothing
        and return the seconds until one has. Atomic across everyone sharing these counts."""
        ...
