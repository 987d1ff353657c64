"""Usage records and budget reservations (design §15): the `UsageStore` port and its files backend.

Files: an append-only journal per day (`data/usage/<YYYY-MM>/<YYYY-MM-DD>.jsonl`, one line per model call) with a
daily roll-up kept in memory (and written beside a past day's journal, `<day>.rollup.json`, once it is read), and
the reservations of running turns in memory (one process per data directory). PostgreSQL: `storage.postgres.usage`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import structlog

from agenthub.aio import run_to_end
from agenthub.errors import StorageError
from agenthub.storage.atomic import atomic_write_text
from agenthub.storage.usage_marks import MARKS_FILE, ForgetMark, names_told_after, read_marks, unnamed, write_marks
from agenthub.storage.usage_marks import forgotten_tag as forgotten_tag  # where it was first: imported from here

log = structlog.get_logger(__name__)

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


class FileUsageStore:
    """The files backend: journals under `data/usage/` (read for the views), and in memory what the budget checks
    need: each scope's tokens per day and month (string keys and int values only, so that a month of many people's
    usage stays out of the garbage collector's scans) and the reservations."""

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / "usage"
        self._days: set[str] = set()  # days whose journal is counted in `_by_scope`
        self._by_scope: dict[str, int] = {}  # "<day or month> <scope key>" → tokens
        self._reserved: dict[str, tuple[tuple[str, ...], int, float]] = {}  # id → scope keys, tokens, expiry
        self._held: dict[str, int] = {}  # scope key → tokens its reservations hold
        self._lapse_at = float("inf")  # the earliest expiry among `_reserved`
        self._warned: set[tuple[str, str]] = set()
        self._months: set[str] = set()  # months whose every journal is loaded
        self._write_lock = asyncio.Lock()
        self._names: dict[str, str] | None = None  # "<channel>\n<sender>" → display name (`names.json`), once read
        self._marks: list[ForgetMark] | None = None  # the forgets' marks (`forgotten.json`), once read

    # ---- writing ---------------------------------------------------------------------------------------

    async def add(self, rows: Sequence[UsageRow], *, release: Sequence[str] = ()) -> None:
        if rows:
            for day in {r.day for r in rows}:
                await self._load_day(day)
            # a cancelled caller keeps the lock to the append's end and counts what it wrote (on disk, uncounted, a
            # budget check would leave those tokens out until a restart)
            await run_to_end(self._add_locked(rows, release))
        else:
            self._ended(release)

    async def _add_locked(self, rows: Sequence[UsageRow], release: Sequence[str]) -> None:
        async with self._write_lock:  # made before a forget (a call ending while it ran, a spool replayed): the tag
            rows = unnamed(rows, await self._known_marks())
            await asyncio.to_thread(self._append, rows)
        for row in rows:
            self._count(row)
        self._ended(release)

    def _ended(self, release: Sequence[str]) -> None:
        for reservation_id in release:  # after the rows are counted: never neither
            self._end(reservation_id)

    def _append(self, rows: Sequence[UsageRow]) -> None:
        by_day: dict[str, list[str]] = {}
        for row in rows:
            by_day.setdefault(row.day, []).append(json.dumps(asdict(row), ensure_ascii=False) + "\n")
        for day, lines in by_day.items():
            try:
                _append_lines(self._journal(day), "".join(lines))
            except OSError as e:  # a full or read-only disk: the rows stay pending in the recorder
                raise StorageError(f"could not append to the usage journal of {day}") from e

    async def unrecorded(self, rows: Sequence[UsageRow]) -> list[UsageRow]:
        return await run_to_end(self._unrecorded_locked(rows))  # a cancelled caller keeps the lock to the read's end

    async def _unrecorded_locked(self, rows: Sequence[UsageRow]) -> list[UsageRow]:
        async with self._write_lock:
            return await asyncio.to_thread(self._unrecorded, rows, unnamed(rows, await self._known_marks()))

    def _unrecorded(self, rows: Sequence[UsageRow], as_stored: Sequence[UsageRow]) -> list[UsageRow]:
        """`as_stored`: the rows as they would be stored (a forget since: under the tag)."""
        found: Counter[UsageRow] = Counter()
        for day in {r.day for r in rows}:
            try:
                lines = self._journal(day).read_text(encoding="utf-8").splitlines()
            except OSError:
                continue
            for line in lines:
                try:
                    found[UsageRow(**json.loads(line))] += 1
                except (ValueError, TypeError):
                    continue
        missing = []
        for row, stored in zip(rows, as_stored, strict=True):
            if found[stored] > 0:
                found[stored] -= 1
            else:
                missing.append(row)
        return missing

    def _count(self, row: UsageRow) -> None:
        tokens = row.tokens
        for scope in scope_keys(row):
            for period in (row.day, row.day[:7]):
                key = f"{period} {scope}"
                self._by_scope[key] = self._by_scope.get(key, 0) + tokens

    # ---- budgets -----------------------------------------------------------------------------------------

    async def reserve(
        self, claims: Sequence[Claim], day: str, tokens: int, ttl_s: float, *, ignore: Collection[str] = ()
    ) -> Reservation:
        await self._load_month(day)
        now = time.monotonic()  # from here to the end nothing awaits: check and reserve are one step
        if now >= self._lapse_at:
            self._lapse(now)
        ignored = self._ignored(ignore) if ignore else {}
        used = {c.scope.key: self._used(c.scope, day, ignored) for c in claims}
        standings, refused = judge(claims, used)
        if refused is not None:
            return Reservation(None, standings, refused)
        rid = reservation_id()
        keys = tuple(used)
        self._reserved[rid] = (keys, tokens, now + ttl_s)
        for key in keys:
            self._held[key] = self._held.get(key, 0) + tokens
        self._lapse_at = min(self._lapse_at, now + ttl_s)
        return Reservation(rid, standings)

    def _end(self, reservation_id: str) -> None:
        ended = self._reserved.pop(reservation_id, None)
        if ended is None:
            return
        keys, tokens, _ = ended
        for key in keys:
            left = self._held[key] - tokens
            if left:
                self._held[key] = left
            else:
                del self._held[key]

    def _lapse(self, now: float) -> None:
        """The reservations whose expiry passed go (their instance died without releasing them)."""
        for rid in [rid for rid, (_, _, expiry) in self._reserved.items() if expiry <= now]:
            self._end(rid)
        self._lapse_at = min((expiry for _, _, expiry in self._reserved.values()), default=float("inf"))

    def _ignored(self, ignore: Collection[str]) -> dict[str, int]:
        """scope key → tokens the reservations `ignore` hold (left out of a check)."""
        held: dict[str, int] = {}
        for rid in ignore:
            keys, tokens, _ = self._reserved.get(rid, ((), 0, 0.0))
            for key in keys:
                held[key] = held.get(key, 0) + tokens
        return held

    def _used(self, scope: Scope, day: str, ignored: Mapping[str, int]) -> tuple[int, int]:
        key = scope.key
        reserved = self._held.get(key, 0) - ignored.get(key, 0)
        counted = [key]
        if scope.kind != "agent":  # what a forget left under their tag (a person's, or their direct chat's) counts
            counted.append(Scope(scope.kind, scope.channel, forgotten_tag(scope.channel, scope.ident)).key)
        used_day = sum(self._by_scope.get(f"{day} {k}", 0) for k in counted)
        used_month = sum(self._by_scope.get(f"{day[:7]} {k}", 0) for k in counted)
        return used_day + reserved, used_month + reserved

    async def release(self, reservation_id: str) -> None:
        self._end(reservation_id)

    async def first_warning(self, scope_key: str, period_key: str) -> bool:
        if (scope_key, period_key) in self._warned:
            return False
        self._warned.add((scope_key, period_key))
        return True

    async def forget(self, who: Forgotten) -> int:
        async with self._write_lock:  # no append meanwhile; every journal and roll-up rewritten whole
            changed = await run_to_end(self._forget_locked(who))  # a cancelled caller keeps the lock to the end
        if changed:  # counted again from the files: the person's tokens now under their tag
            self._days.clear()
            self._months.clear()
            self._by_scope.clear()
        return changed

    async def _forget_locked(self, who: Forgotten) -> int:
        changed = await asyncio.to_thread(self._forget_files, who)
        names = await self._known_names()
        key = _name_key(who.channel, who.sender_id)
        if key in names:  # their name goes with their id: off the disk first, then out of the cache (a refused
            kept = {k: v for k, v in names.items() if k != key}  # write leaves it known, for the forget asked again)
            await asyncio.to_thread(self._write_names, kept)
            del names[key]
        marks = [*await self._known_marks(), ForgetMark.of(who, time.time())]  # rows made before: the tag
        await asyncio.to_thread(write_marks, self.root / MARKS_FILE, marks)
        self._marks = marks
        return changed

    def _forget_files(self, who: Forgotten) -> int:
        if not self.root.is_dir():
            return 0
        changed = 0
        for path in sorted(self.root.glob("*/*.jsonl")) + sorted(self.root.glob("*/*.rollup.json")):
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as e:
                raise StorageError("could not read a usage journal") from e
            rewritten, count = _forget_text(text, who, rollup=path.name.endswith(".rollup.json"))
            if count:
                try:
                    atomic_write_text(path, rewritten)
                except OSError as e:
                    raise StorageError("could not rewrite a usage journal") from e
                changed += count
        return changed

    # ---- senders' names -----------------------------------------------------------------------------------

    async def name_senders(
        self, names: Mapping[tuple[str, str], str], told: Mapping[tuple[str, str], float] | None = None
    ) -> None:
        # a cancelled caller keeps the lock to the write's end: a forget after it finds the name to drop (else the
        # thread could write the name back after the forget)
        await run_to_end(self._name_senders_locked(names, told or {}))

    async def _name_senders_locked(
        self, names: Mapping[tuple[str, str], str], told: Mapping[tuple[str, str], float]
    ) -> None:
        async with self._write_lock:
            names = names_told_after(names, told, await self._known_marks())
            known = await self._known_names()
            changed = {_name_key(*who): name for who, name in names.items() if known.get(_name_key(*who)) != name}
            if changed:
                await asyncio.to_thread(self._write_names, {**known, **changed})
                known.update(changed)

    async def sender_names(self, who: Collection[tuple[str, str]]) -> dict[tuple[str, str], str]:
        async with self._write_lock:
            known = await self._known_names()
        return {pair: name for pair in who if (name := known.get(_name_key(*pair))) is not None}

    async def _known_marks(self) -> list[ForgetMark]:
        """The forget marks of `forgotten.json` (read once; the caller holds the write lock)."""
        if self._marks is None:
            self._marks = await asyncio.to_thread(read_marks, self.root / MARKS_FILE)
        return self._marks

    async def _known_names(self) -> dict[str, str]:
        """The names of `names.json` (read once; the caller holds the write lock)."""
        if self._names is None:
            self._names = await asyncio.to_thread(self._read_names)
        return self._names

    def _read_names(self) -> dict[str, str]:
        try:
            found = json.loads((self.root / NAMES_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            log.warning("usage_names_unreadable", error=type(e).__name__)
            return {}
        return (
            {k: v for k, v in found.items() if isinstance(k, str) and isinstance(v, str)}
            if isinstance(found, dict)
            else {}
        )

    def _write_names(self, names: dict[str, str]) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.root / NAMES_FILE, json.dumps(names, ensure_ascii=False, sort_keys=True))
        except OSError as e:
            raise StorageError("could not write the usage names") from e

    # ---- retention ---------------------------------------------------------------------------------------

    async def prune(self, before_month: str) -> int:
        async with self._write_lock:  # no append meanwhile
            return await asyncio.to_thread(self._prune, before_month)

    def _prune(self, before_month: str) -> int:
        """Each month directory before `before_month` gets its month roll-up (written first: a crash before the day
        files go leaves them unread beside it, deleted by the next prune), then loses its day files."""
        if not self.root.is_dir():
            return 0
        folded = 0
        for month in sorted(p for p in self.root.iterdir() if p.is_dir() and p.name < before_month):
            rollup = month / f"{month.name}{ROLLUP}"
            days = sorted(month.glob("*.jsonl"))
            if not rollup.exists():
                summed: dict[tuple[str, ...], UsageRow] = {}
                for journal in days:
                    for row in self._read_day(journal.stem, write_rollup=False):
                        folded += 1
                        summed[row.group] = _plus(summed.get(row.group), dataclasses.replace(row, day=month.name))
                try:
                    atomic_write_text(rollup, json.dumps([asdict(r) for r in summed.values()], ensure_ascii=False))
                except OSError as e:
                    raise StorageError("could not write a usage month roll-up") from e
            for path in [*days, *(p for p in month.glob(f"*{ROLLUP}") if p != rollup)]:  # the days' files
                path.unlink(missing_ok=True)
        return folded

    # ---- reading -----------------------------------------------------------------------------------------

    async def days(self, first: str, last: str) -> list[UsageRow]:
        async with self._write_lock:  # every journal line whole
            return await asyncio.to_thread(self._read_days, first, last)

    def _read_days(self, first: str, last: str) -> list[UsageRow]:
        months = self._folded_months(first, last)
        rows = [row for month in months for row in _read_rollup(self.root / month / f"{month}{ROLLUP}")]
        days = [day for day in sorted(self._journal_days(first, last)) if day[:7] not in months]
        return rows + [row for day in days for row in self._read_day(day)]

    def _folded_months(self, first: str, last: str) -> list[str]:
        """The months from `first`'s to `last`'s that retention folded into a month roll-up."""
        if not self.root.is_dir():
            return []
        return sorted(
            m.name
            for m in self.root.iterdir()
            if first[:7] <= m.name <= last[:7] and (m / f"{m.name}{ROLLUP}").is_file()
        )

    def _journal(self, day: str) -> Path:
        return self.root / day[:7] / f"{day}.jsonl"

    def _journal_days(self, first: str, last: str) -> list[str]:
        if not self.root.is_dir():
            return []
        found = []
        for month in self.root.iterdir():
            if month.is_dir() and first[:7] <= month.name <= last[:7]:
                found += [p.stem for p in month.glob("*.jsonl") if first <= p.stem <= last]
        return found

    async def _load_month(self, day: str) -> None:
        if day[:7] in self._months:
            return
        first, _ = month_days(day)
        for found in await asyncio.to_thread(self._journal_days, first, day[:7] + "-31"):
            await self._load_day(found)
        self._months.add(day[:7])

    async def _load_day(self, day: str) -> None:
        if day in self._days:
            return
        async with self._write_lock:
            rows = await asyncio.to_thread(self._read_day, day)
        if day in self._days:  # loaded meanwhile
            return
        self._days.add(day)
        for row in rows:
            self._count(row)

    def _read_day(self, day: str, *, write_rollup: bool = True) -> list[UsageRow]:
        """A day's calls: its roll-up when one was written (the journal of a past day never changes), else the
        journal (a torn last line is skipped); a past day's roll-up is written then."""
        journal = self._journal(day)
        rollup = journal.with_suffix(ROLLUP)
        try:
            return [UsageRow(**r) for r in json.loads(rollup.read_text(encoding="utf-8"))]
        except (OSError, ValueError, TypeError):
            pass
        rows: dict[tuple[str, ...], UsageRow] = {}
        try:
            lines = journal.read_text(encoding="utf-8").splitlines()
        except OSError:
            return []
        for line in lines:
            try:
                row = UsageRow(**json.loads(line))
            except (ValueError, TypeError):
                log.warning("usage_journal_line_skipped", day=day)
                continue
            rows[row.group] = _plus(rows.get(row.group), row)
        summed = list(rows.values())
        if write_rollup and day < time.strftime(
            "%Y-%m-%d", time.gmtime(time.time() - 2 * 86400)
        ):  # past in every time zone
            try:
                atomic_write_text(rollup, json.dumps([asdict(r) for r in summed], ensure_ascii=False))
            except OSError as e:
                log.warning("usage_rollup_not_written", day=day, error=str(e))
        return summed


def _read_rollup(path: Path) -> list[UsageRow]:
    try:
        return [UsageRow(**r) for r in json.loads(path.read_text(encoding="utf-8"))]
    except (OSError, ValueError, TypeError) as e:
        raise StorageError("could not read a usage month roll-up") from e


def _forget_text(text: str, who: Forgotten, *, rollup: bool) -> tuple[str, int]:
    """A journal (one JSON row per line) or a roll-up (a JSON list of rows) with `who`'s rows redacted."""
    if rollup:
        try:
            rows = json.loads(text)
        except ValueError:
            return text, 0
        hits = [i for i, r in enumerate(rows) if who.covers(UsageRow(**r))]
        for i in hits:
            rows[i] = who.redacted(rows[i])
        return json.dumps(rows, ensure_ascii=False), len(hits)
    lines, count = [], 0
    for line in text.splitlines(keepends=True):
        try:
            row = json.loads(line)
            hit = who.covers(UsageRow(**row))
        except (ValueError, TypeError):
            hit = False  # a torn line stays as it is (the reader skips it)
        if hit:
            line = json.dumps(who.redacted(row), ensure_ascii=False) + "\n"
            count += 1
        lines.append(line)
    return "".join(lines), count


def _append_lines(path: Path, text: str) -> None:
    """Append whole lines; a write that fails part-way is cut back, so a retry never glues onto a torn line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as f:
        start = f.tell()
        try:
            f.write(text.encode("utf-8"))
            f.flush()
        except OSError:
            try:
                f.truncate(start)
            except OSError:
                pass  # the reader skips a torn last line
            raise


def _plus(a: UsageRow | None, b: UsageRow) -> UsageRow:
    if a is None:
        return UsageRow(**{**asdict(b), "at": 0.0})
    return UsageRow(
        a.day,
        a.purpose,
        a.agent,
        a.channel,
        a.chat_id,
        a.sender_id,
        a.model,
        a.input + b.input,
        a.output + b.output,
        a.cache_read + b.cache_read,
        a.cache_write + b.cache_write,
        a.calls + b.calls,
        a.estimated + b.estimated,
    )


def _name_key(channel: str, sender_id: str) -> str:
    return f"{channel}\n{sender_id}"


def scope_keys(row: UsageRow) -> tuple[str, str, str]:
    """The keys of the scopes a row counts in: its sender's, its chat's, its agent's."""
    return (
        Scope("user", row.channel, row.sender_id).key,
        Scope("chat", row.channel, row.chat_id).key,
        Scope("agent", "", row.agent).key,
    )
