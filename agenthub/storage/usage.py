"""Usage records and budget reservations (design §15): what the `UsageStore` port (`storage.ports.usage`) and its
backends (`usage_files`, `storage.postgres.usage`) share: rows, scopes, claims, standings and the budget rule."""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agenthub.errors import StorageError
from agenthub.storage.usage_marks import forgotten_tag as forgotten_tag  # where it was first: imported from here

if TYPE_CHECKING:
    from agenthub.storage.usage_files import FileUsageStore as FileUsageStore

Kind = Literal["user", "chat", "agent"]
Period = Literal["day", "month"]
TOKEN_KINDS = ("input", "output", "cache_read", "cache_write")
ROLLUP = ".rollup.json"
"""A roll-up's suffix: `<YYYY-MM-DD>.rollup.json` a day's, `<YYYY-MM>.rollup.json` a month's (retention)."""
NAMES_FILE = "names.json"
"""Under `data/usage/`: the senders' display names (`"<channel>\\n<sender>"` → name), for per-person rows."""


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One model call (`calls` = 1), or the sum of a day's calls with the same who/model/purpose (a roll-up)."""

    day: str
    """`YYYY-MM-DD` in `scheduler.timezone`; the month is its first seven characters."""
    purpose: str
    agent: str
    channel: str
    chat_id: str
    sender_id: str
    model: str
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    calls: int = 1
    estimated: int = 0
    """How many of `calls` reported no usage (our estimate is counted instead)."""
    at: float = 0.0

    @property
    def tokens(self) -> int:
        return self.input + self.output + self.cache_read + self.cache_write

    @property
    def group(self) -> tuple[str, str, str, str, str, str]:
        return (self.agent, self.channel, self.chat_id, self.sender_id, self.model, self.purpose)


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose budget: a sender (`user`, per channel), a chat (per channel) or an agent."""

    kind: Kind
    channel: str
    ident: str

    @property
    def key(self) -> str:
        return f"agent:{self.ident}" if self.kind == "agent" else f"{self.kind}:{self.channel}:{self.ident}"

    def covers(self, row: UsageRow) -> bool:
        if self.kind == "agent":
            return row.agent == self.ident
        who = row.sender_id if self.kind == "user" else row.chat_id
        return row.channel == self.channel and who == self.ident


@dataclass(frozen=True, slots=True)
class Claim:
    """A scope with its limits (0: none) that a turn must fit in."""

    scope: Scope
    day_limit: int = 0
    month_limit: int = 0


@dataclass(frozen=True, slots=True)
class Standing:
    """Where a scope stood against one limit when a turn asked: used plus reserved by turns already running."""

    scope: Scope
    period: Period
    limit: int
    used: int

    @property
    def share(self) -> float:
        return self.used / self.limit if self.limit else 0.0


@dataclass
class Reservation:
    """The answer to `reserve`: an id to release (admitted), or the limit reached (`refused`)."""

    id: str | None
    standings: list[Standing] = field(default_factory=list)
    refused: Standing | None = None


def judge(claims: Sequence[Claim], used: dict[str, tuple[int, int]]) -> tuple[list[Standing], Standing | None]:
    """Every limit's standing (`used`: scope key → (day, month) used plus reserved), and the first one reached."""
    standings: list[Standing] = []
    refused = None
    for claim in claims:  # one plain loop: a check judges a few claims, and every turn that asks the store does
        scope = claim.scope
        day, month = used.get(scope.key, (0, 0))
        if claim.day_limit > 0:
            standings.append(standing := Standing(scope, "day", claim.day_limit, day))
            if refused is None and day >= claim.day_limit:
                refused = standing
        if claim.month_limit > 0:
            standings.append(standing := Standing(scope, "month", claim.month_limit, month))
            if refused is None and month >= claim.month_limit:
                refused = standing
    return standings, refused


def reservation_of(
    claims: Sequence[Claim], rid: str, rows: Sequence[tuple[Any, ...]], what: str = "reserve a turn's budget"
) -> Reservation:
    """The answer of a check-and-reserve (`usage_reserve_except`'s rows: scope key, day and month used plus
    reserved, whether it reserved), judged as the store judged it."""
    used, reserved = used_of(rows)
    standings, refused = judge(claims, used)
    if not reserved and refused is None:  # cannot happen: the same rule on both sides
        raise StorageError(f"could not {what}: the database and AgentHub disagree")
    return Reservation(rid if reserved else None, standings, refused)


def used_of(rows: Sequence[tuple[Any, ...]]) -> tuple[dict[str, tuple[int, int]], bool]:
    """`usage_reserve_except`'s rows read: scope key → (day, month) used plus reserved, and whether it reserved."""
    used: dict[str, tuple[int, int]] = {}
    reserved = True
    for r in rows:
        used[str(r[0])] = (int(r[1]), int(r[2]))
        reserved = reserved and bool(r[3])
    return used, reserved


@dataclass(eq=False, slots=True)
class ClaimRide:
    """A budget check and reservation made in the statement of a session's claim (PostgreSQL: the turn of a
    session this instance does not hold pays one round trip for both). `params`: the usage store's own
    (`RidingReserves.ride`); the claim sets `sent` before it sends it (from then on a reservation `id` may exist)
    and `rows` once answered (None: not made, the lease was not granted or a newer token fenced the session)."""

    id: str
    params: tuple[object, ...]
    sent: bool = False
    rows: list[tuple[Any, ...]] | None = None
    then: Callable[[], None] | None = None
    """Called once the claim it rode in came back (or failed, or was not made: `done`)."""

    def done(self) -> None:
        """The claim is through with it (answered, failed, or not made): `then`, once."""
        then, self.then = self.then, None
        if then is not None:
            then()


@dataclass(frozen=True, slots=True)
class Forgotten:
    """Whose usage rows lose their name: `sender_id` on `channel` (in `agents`; only in `chat_id` when given),
    written as `tag` instead, also where a direct chat is named by them."""

    channel: str
    sender_id: str
    tag: str
    agents: tuple[str, ...]
    chat_id: str | None = None

    def covers(self, row: UsageRow) -> bool:
        return (
            row.channel == self.channel
            and row.sender_id == self.sender_id
            and row.agent in self.agents
            and (self.chat_id is None or row.chat_id == self.chat_id)
        )

    def redacted(self, row: dict[str, Any]) -> dict[str, Any]:
        chat = self.tag if row.get("chat_id") == self.sender_id else row.get("chat_id")
        return {**row, "sender_id": self.tag, "chat_id": chat}


class _Ids:
    """Reservation ids: a random prefix per process (drawn again in a forked child) and a counter, so that a check
    makes no random draw (a system call) of its own; ids stay unique across instances."""

    def __init__(self) -> None:
        self.prefix = ""
        self.counter = itertools.count(1)
        self.reseed()

    def reseed(self) -> None:
        self.prefix, self.counter = uuid.uuid4().hex[:20], itertools.count(1)

    def next(self) -> str:
        return f"{self.prefix}{next(self.counter):012x}"


_IDS = _Ids()
os.register_at_fork(after_in_child=_IDS.reseed)


def reservation_id() -> str:
    """A new reservation's id (32 hex digits, as a UUID's)."""
    return _IDS.next()


def month_days(day: str) -> tuple[str, str]:
    """The first day of `day`'s month and `day`."""
    return day[:7] + "-01", day


def scope_keys(row: UsageRow) -> tuple[str, str, str]:
    """The keys of the scopes a row counts in: its sender's, its chat's, its agent's."""
    return (
        Scope("user", row.channel, row.sender_id).key,
        Scope("chat", row.channel, row.chat_id).key,
        Scope("agent", "", row.agent).key,
    )


if not TYPE_CHECKING:  # seen by mypy, a module `__getattr__` would make every misspelled name of this module `Any`

    def __getattr__(name: str) -> Any:
        """`FileUsageStore`, importable from here where it was first (its module, `usage_files`, imports this one);
        the type checker sees it through the import above."""
        if name == "FileUsageStore":
            from agenthub.storage.usage_files import FileUsageStore

            return FileUsageStore
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
