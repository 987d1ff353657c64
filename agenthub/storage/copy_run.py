"""`store migrate`'s run: what an item is, how each is decided (copy, leave, skip) and counted."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agenthub.session_keys import SessionKey, validate_agent_name
from agenthub.storage.postgres import (
    PostgresInbox,
    PostgresJobs,
    PostgresMemoryStore,
    PostgresSessionStore,
    PostgresTokens,
)
from agenthub.storage.postgres.copies import CopyLedger
from agenthub.storage.postgres.database import Database

Report = Callable[[str], None]
Kind = Literal[
    "sessions", "memory_files", "tokens", "inbox", "jobs", "usage_days", "usage_forget_marks", "idempotency"
]  # fmt: skip
FIGURES = (
    "sessions", "records", "archived", "meta", "memory_files", "tokens", "inbox", "jobs", "usage_days",
    "usage_forget_marks", "idempotency",
)  # fmt: skip
"""What the report counts: the items of each kind, and the records, archived records and metas of the sessions."""
Decision = Literal["same", "copy", "moved", "conflict"]

MOVED: dict[Kind, str] = {
    "sessions": "its history in the database has changed since it was copied",
    "memory_files": "the database's file has changed since it was copied",
    "tokens": "revoked or replaced in the database since it was copied",
    "inbox": "answered in the database since it was copied",
    "jobs": "changed or run in the database since it was copied",
    "usage_days": "the database has recorded more usage on that day since it was copied",
    "usage_forget_marks": "gone from the database since it was copied",
    "idempotency": "used again in the database since it was copied",
}
CONFLICT = "the database holds another one, not copied from these files"
COPYING = "copying:"
"""Recorded before an item is written: a run cut short midway is known to have been writing it."""


@dataclass
class Tally:
    in_files: int = 0
    verified: int = 0
    """In the database as in the files after the run (copied now or before)."""
    copied: int = 0
    skipped: int = 0
    """Left as the database has it."""


@dataclass(frozen=True)
class Skip:
    kind: Kind
    item: str
    reason: str
    conflict: bool
    """Never copied from these files (the database has its own): an operator decides, so the run fails."""


@dataclass(frozen=True)
class Checked:
    """One item of the files, as the verify needs it: what it counts for and the digest of its content."""

    kind: Kind
    item: str
    digest: str
    weights: dict[str, int]
    key: SessionKey | None = None
    """The session's key (sessions only)."""


@dataclass
class Counts:
    tallies: dict[str, Tally] = field(default_factory=lambda: {what: Tally() for what in FIGURES})
    skipped: list[Skip] = field(default_factory=list)
    differ: list[str] = field(default_factory=list)
    """Items copied (now or before) that the database does not hold as the files do."""

    def add(self, attribute: str, weights: dict[str, int]) -> None:
        for what, number in weights.items():
            tally = self.tallies[what]
            setattr(tally, attribute, getattr(tally, attribute) + number)


@dataclass
class Target:
    sessions: PostgresSessionStore
    memory: PostgresMemoryStore
    tokens: PostgresTokens
    inbox: PostgresInbox
    ledger: CopyLedger
    jobs: PostgresJobs
    database: Database | None = None
    """For the usage days and idempotency keys (None: they are not copied)."""
    idempotency_window_s: float = 0.0
    """Idempotency keys taken longer ago than this are not copied (out of their window, they mean nothing)."""


@dataclass(frozen=True)
class Held:
    """What the database holds of an item: its digest (None: nothing), and whether that is a beginning of the
    files' version (a copy cut short, redone whole)."""

    digest: str | None
    behind: bool = False


def digest_of(value: Any) -> str:
    """SHA-256 of `value`'s JSON; a lone surrogate (a title or a record may hold one) encoded as it is, so the
    digests of everything else stay what earlier runs recorded."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def decide(files_digest: str, held: Held, recorded: str | None) -> Decision:
    """Copy what the database lacks, holds as it was copied (the files moved on), or was being copied when a run
    was cut short; never overwrite what it has changed since the copy (`moved`) or holds without a copy from
    here (`conflict`)."""
    if held.digest == files_digest:
        return "same"
    if recorded is not None and recorded.startswith(COPYING):
        return "copy"
    if recorded is not None:
        return "copy" if held.digest == recorded else "moved"
    return "copy" if held.digest is None or held.behind else "conflict"


class CopyRun:
    def __init__(self, target: Target, report: Report) -> None:
        self.target, self.report, self.counts = target, report, Counts()
        self.checked: list[Checked] = []

    async def settle(
        self,
        item: Checked,
        held: Held,
        recorded: str | None,
        write: Callable[[], Awaitable[None]],
        copied: str,
        *,
        records_itself: bool = False,
    ) -> None:
        """Copy `item` (then record it) or leave it, as `decide` says. `records_itself`: `write` records the
        digest in the transaction that writes the item (an inbox entry: restored and recorded together)."""
        self.checked.append(item)
        self.counts.add("in_files", item.weights)
        decision = decide(item.digest, held, recorded)
        if decision == "same":
            if recorded != item.digest:  # copied by a run cut short before it recorded it
                await self.target.ledger.record(item.kind, item.item, item.digest)
            return
        if decision in ("moved", "conflict"):
            skip = Skip(
                item.kind, item.item, MOVED[item.kind] if decision == "moved" else CONFLICT, decision == "conflict"
            )
            self.counts.skipped.append(skip)
            self.counts.add("skipped", item.weights)
            self.report(f"skipped {item.kind} {item.item}: {skip.reason}")
            return
        await self.target.ledger.record(item.kind, item.item, COPYING + item.digest)
        await write()
        if not records_itself:
            await self.target.ledger.record(item.kind, item.item, item.digest)
        self.counts.add("copied", item.weights)
        self.report(copied)


def agent_dirs(data_dir: Path) -> list[str]:
    """The agents `data_dir` holds a directory of (hidden, linked and invalid names left out)."""
    if not data_dir.is_dir():
        return []
    names = []
    for child in sorted(data_dir.iterdir()):
        if child.is_dir() and not child.is_symlink() and not child.name.startswith("."):
            try:
                names.append(validate_agent_name(child.name))
            except ValueError:
                continue
    return names
