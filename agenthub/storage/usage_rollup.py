"""The files usage backend's roll-ups: a day's calls summed (and written beside a past day's journal), a month's
folded by retention (`usage_files.FileUsageStore`)."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import asdict
from pathlib import Path

import structlog

from agenthub.errors import StorageError
from agenthub.storage.atomic import atomic_write_text
from agenthub.storage.usage import ROLLUP, UsageRow

log = structlog.get_logger(__name__)


def journal_path(root: Path, day: str) -> Path:
    """A day's journal: `<root>/<YYYY-MM>/<YYYY-MM-DD>.jsonl`."""
    return root / day[:7] / f"{day}.jsonl"


def fold_months(root: Path, before_month: str) -> int:
    """Each month directory before `before_month` gets its month roll-up (written first: a crash before the day
    files go leaves them unread beside it, deleted by the next prune), then loses its day files."""
    if not root.is_dir():
        return 0
    folded = 0
    for month in sorted(p for p in root.iterdir() if p.is_dir() and p.name < before_month):
        rollup = month / f"{month.name}{ROLLUP}"
        days = sorted(month.glob("*.jsonl"))
        if not rollup.exists():
            summed: dict[tuple[str, ...], UsageRow] = {}
            for journal in days:
                for row in read_day(root, journal.stem, write_rollup=False):
                    folded += 1
                    summed[row.group] = plus(summed.get(row.group), dataclasses.replace(row, day=month.name))
            try:
                atomic_write_text(rollup, json.dumps([asdict(r) for r in summed.values()], ensure_ascii=False))
            except OSError as e:
                raise StorageError("could not write a usage month roll-up") from e
        for path in [*days, *(p for p in month.glob(f"*{ROLLUP}") if p != rollup)]:  # the days' files
            path.unlink(missing_ok=True)
    return folded


def read_day(root: Path, day: str, *, write_rollup: bool = True) -> list[UsageRow]:
    """A day's calls: its roll-up when one was written (the journal of a past day never changes), else the
    journal (a torn last line is skipped); a past day's roll-up is written then."""
    journal = journal_path(root, day)
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
        rows[row.group] = plus(rows.get(row.group), row)
    summed = list(rows.values())
    if write_rollup and day < time.strftime(
        "%Y-%m-%d", time.gmtime(time.time() - 2 * 86400)
    ):  # past in every time zone
        try:
            atomic_write_text(rollup, json.dumps([asdict(r) for r in summed], ensure_ascii=False))
        except OSError as e:
            log.warning("usage_rollup_not_written", day=day, error=str(e))
    return summed


def read_rollup(path: Path) -> list[UsageRow]:
    try:
        return [UsageRow(**r) for r in json.loads(path.read_text(encoding="utf-8"))]
    except (OSError, ValueError, TypeError) as e:
        raise StorageError("could not read a usage month roll-up") from e


def plus(a: UsageRow | None, b: UsageRow) -> UsageRow:
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
