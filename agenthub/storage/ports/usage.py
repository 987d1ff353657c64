"""The usage ports: usage rows and budget reservations (`UsageStore`), a reservation riding a session's claim."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from agenthub.storage.usage import Claim, ClaimRide, Forgotten, Reservation, UsageRow


@runtime_checkable
class RidingReserves(Protocol):
    """A usage store whose check-and-reserve can ride in a session's claim (`SessionClaims.claim`, PostgreSQL)."""

    def ride(
        self, claims: Sequence[Claim], day: str, tokens: int, ttl_s: float, *, ignore: Collection[str] = ()
    ) -> ClaimRide:
        """`reserve`'s request, to be sent with a claim; its rows are read with `storage.usage.reservation_of`."""
        ...


class UsageStore(Protocol):
    """Where usage and reservations live; every method may raise `StorageError`."""

    async def add(self, rows: Sequence[UsageRow], *, release: Sequence[str] = ()) -> None:
        """Append calls to the journal and the day roll-ups, and end the reservations `release` (one step)."""
        ...

    async def unrecorded(self, rows: Sequence[UsageRow]) -> list[UsageRow]:
        """The calls of `rows` the journal lacks (matched on time, who, model, purpose and tokens; as often as
        they occur): what a killed process's spool still has to write."""
        ...

    async def reserve(
        self, claims: Sequence[Claim], day: str, tokens: int, ttl_s: float, *, ignore: Collection[str] = ()
    ) -> Reservation:
        """Atomically (across instances): refuse when a claim's used + reserved reaches a limit, else reserve
        `tokens` in every claimed scope for at most `ttl_s` (a dead instance's reservations lapse). The reservations
        `ignore` do not count: settled, their turns' usage stored, their release not written yet."""
        ...

    async def release(self, reservation_id: str) -> None:
        """The turn ended (its usage is recorded): its reservation goes."""
        ...

    async def first_warning(self, scope_key: str, period_key: str) -> bool:
        """True exactly once per scope and period (`2026-12-03`, `2026-12`): the warning notice is due."""
        ...

    async def days(self, first: str, last: str) -> list[UsageRow]:
        """The day roll-ups from `first` to `last` (inclusive, `YYYY-MM-DD`)."""
        ...

    async def forget(self, who: Forgotten) -> int:
        """A person's identity out of every usage row naming them (replaced by `who.tag`; the tokens stay, so
        the chats', agents' and models' totals are unchanged), and their display name with it; how many rows
        (lines) changed."""
        ...

    async def name_senders(
        self, names: Mapping[tuple[str, str], str], told: Mapping[tuple[str, str], float] | None = None
    ) -> None:
        """Remember the display name of each (channel, sender id) (the latest given wins): per-person usage rows
        name the sender. A name `told` (epoch seconds) no later than a forget of its sender is not kept."""
        ...

    async def sender_names(self, who: Collection[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """The display names known of `who` ((channel, sender id) pairs; those without one are left out)."""
        ...

    async def prune(self, before_month: str) -> int:
        """Retention: the months before `before_month` (`YYYY-MM`) keep only their month roll-up (the calls summed
        per agent, chat, sender, model and purpose; `days` gives it as rows whose `day` is the month); their
        per-call and per-day records (and day totals, warning marks) go. How many day records were folded."""
        ...
