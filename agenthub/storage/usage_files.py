"""The files backend of the `UsageStore` port (design §15): an append-only journal per day
(`data/usage/<YYYY-MM>/<YYYY-MM-DD>.jsonl`, one line per model call) with a daily roll-up kept in memory (and written
beside a past day's journal, `<day>.rollup.json`, once it is read: `usage_rollup`), and the reservations of running
turns in memory (one process per data directory). PostgreSQL: `storage.postgres.usage`."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

import structlog

from agenthub.aio import run_to_end
from agenthub.errors import StorageError
from agenthub.storage.atomic import atomic_write_text
from agenthub.storage.usage import (
    NAMES_FILE,
    ROLLUP,
    Claim,
    Forgotten,
    Reservation,
    Scope,
    UsageRow,
    forgotten_tag,
    judge,
    month_days,
    reservation_id,
    scope_keys,
)
from agenthub.storage.usage_marks import MARKS_FILE, ForgetMark, names_told_after, read_marks, unnamed, write_marks
from agenthub.storage.usage_rollup import fold_months, journal_path, read_day, read_rollup

log = structlog.get_logger(__name__)


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
        for rid in release:  # after the rows are counted: never neither
            self._end(rid)

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
        return fold_months(self.root, before_month)

    # ---- reading -----------------------------------------------------------------------------------------

    async def days(self, first: str, last: str) -> list[UsageRow]:
        async with self._write_lock:  # every journal line whole
            return await asyncio.to_thread(self._read_days, first, last)

    def _read_days(self, first: str, last: str) -> list[UsageRow]:
        months = self._folded_months(first, last)
        rows = [row for month in months for row in read_rollup(self.root / month / f"{month}{ROLLUP}")]
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
        return journal_path(self.root, day)

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
        return read_day(self.root, day, write_rollup=write_rollup)


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


def _name_key(channel: str, sender_id: str) -> str:
    return f"{channel}\n{sender_id}"
