"""`agenthub store migrate --from files --to postgres`: copy a files deployment's state into PostgreSQL, item by
item: a session (history, archive, meta), a memory file, an API token, an unanswered inbox entry.

Idempotent and resumable: an item the database holds as the files do is left as it is, and a run cut short is
simply run again. Each item copied is recorded with a digest of what was written (`store_copies`), so a re-run never
overwrites what the database has changed since (a session answered on PostgreSQL, a memory file L3 rewrote, a
revoked token, a settled entry): that item is reported as skipped, with the reason. The verify compares each item
of the files with the database's copy, never whole tables (which other instances keep changing)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agenthub.errors import InvalidIdError
from agenthub.session_keys import SessionKey, key_from_file_stem, validate_agent_name
from agenthub.storage import copy_usage
from agenthub.storage.files import FileSessionStore
from agenthub.storage.inbox import FileInbox, InboxEntry
from agenthub.storage.jobs import FileJobDocuments, JobDocument
from agenthub.storage.memory_files import L3_STATE_FILE, FileMemoryStore, MemoryKind, MemoryName
from agenthub.storage.meta import SessionMeta
from agenthub.storage.postgres import (
    PostgresInbox,
    PostgresJobs,
    PostgresMemoryStore,
    PostgresSessionStore,
    PostgresTokens,
)
from agenthub.storage.postgres.copies import CopyLedger
from agenthub.storage.postgres.database import Database
from agenthub.storage.store import HistoryRecord
from agenthub.storage.tokens import StoredToken, TokenStore
from agenthub.storage.usage_marks import ForgetMark

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
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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


class _Run:
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


async def copy_files_to_postgres(data_dir: Path, auth_dir: Path, target: Target, report: Report) -> Counts:
    """Copy every session, memory file, API token, unanswered inbox entry and scheduled job the database does not
    hold yet, then verify each item of the files against the database's copy."""
    run = _Run(target, report)
    await _copy_sessions(run, data_dir)
    await _copy_memory_files(run, data_dir, auth_dir)
    await _copy_tokens(run, auth_dir)
    await _copy_inbox(run, data_dir)
    await _copy_jobs(run, data_dir)
    if target.database is not None:
        await _copy_usage(run, target.database, data_dir)
        await _copy_forget_marks(run, target.database, data_dir)
        await _copy_idempotency(run, target.database, data_dir, target.idempotency_window_s)
    await verify(target, run.checked, run.counts)
    return run.counts


async def verify(target: Target, checked: Sequence[Checked], counts: Counts) -> None:
    """Each item of the files that was not skipped must be in the database as in the files."""
    skipped = {(s.kind, s.item) for s in counts.skipped}
    held = await _held_digests(target, [c for c in checked if (c.kind, c.item) not in skipped])
    for item in checked:
        if (item.kind, item.item) in skipped:
            continue
        if held.get((item.kind, item.item)) == item.digest:
            counts.add("verified", item.weights)
        else:
            counts.differ.append(f"{item.kind} {item.item}")


async def _held_digests(target: Target, checked: Sequence[Checked]) -> dict[tuple[Kind, str], str]:
    found: dict[tuple[Kind, str], str] = {}
    kinds = {c.kind for c in checked}
    memory = {_memory_item(n): n for n in await target.memory.names()} if "memory_files" in kinds else {}
    tokens = {t.name: t for t in await target.tokens.stored()} if "tokens" in kinds else {}
    inbox = {e.id: e for e in await target.inbox.unsettled()} if "inbox" in kinds else {}
    jobs = {_job_item(d): d for d in await target.jobs.load_all()} if "jobs" in kinds else {}
    for item in checked:
        digest: str | None = None
        if item.key is not None:
            digest = (await _held_session(target.sessions, item.key, [], [], None)).digest
        elif item.kind == "memory_files" and item.item in memory:
            digest = digest_of(await target.memory.read(memory[item.item]))
        elif item.kind == "tokens" and item.item in tokens:
            digest = _token_digest(tokens[item.item])
        elif item.kind == "inbox" and item.item in inbox:
            digest = _entry_digest(inbox[item.item])
        elif item.kind == "jobs" and item.item in jobs:
            digest = _job_digest(jobs[item.item])
        elif item.kind in ("usage_days", "usage_forget_marks", "idempotency") and target.database is not None:
            digest = await _held_usage_or_key(target.database, item)
        if digest is not None:
            found[(item.kind, item.item)] = digest
    return found


# ---- sessions --------------------------------------------------------------------------------------------------


async def _copy_sessions(run: _Run, data_dir: Path) -> None:
    source, target = FileSessionStore(data_dir), run.target.sessions
    recorded = await run.target.ledger.digests("sessions")
    for agent in _agents(data_dir):
        for key in await source.list_keys(agent):
            records, archived, meta = (
                await source.load(key),
                await source.read_archive(key),
                await source.read_meta(key),
            )
            weights = {"sessions": 1, "records": len(records), "archived": len(archived), "meta": int(meta is not None)}
            item = Checked("sessions", str(key), _session_digest(records, archived, meta), weights, key)
            held = await _held_session(target, key, records, archived, meta)

            async def write(
                key: SessionKey = key,
                records: list[HistoryRecord] = records,
                archived: list[HistoryRecord] = archived,
                meta: SessionMeta | None = meta,
            ) -> None:
                await target.rewrite_archive(key, archived)
                await target.replace(key, records, archive=[])
                if meta is not None:  # last: a copy cut short before it is redone whole
                    await target.write_meta(key, meta, durable=True)

            copied = f"copied {key} ({len(records)} records, {len(archived)} archived)"
            await run.settle(item, held, recorded.get(str(key)), write, copied)


def _session_digest(records: list[HistoryRecord], archived: list[HistoryRecord], meta: SessionMeta | None) -> str:
    return digest_of({"records": records, "archived": archived, "meta": None if meta is None else meta.to_json()})


async def _held_session(
    target: PostgresSessionStore,
    key: SessionKey,
    records: list[HistoryRecord],
    archived: list[HistoryRecord],
    meta: SessionMeta | None,
) -> Held:
    """The database's session; `behind` when each part is a beginning of the files' (`records`, `archived`,
    `meta`), as a copy cut short leaves it."""
    held_records, held_archived, held_meta = (
        await target.load(key),
        await target.read_archive(key),
        await target.read_meta(key),
    )
    if not held_records and not held_archived and held_meta is None:
        return Held(None)
    behind = (
        held_records == records[: len(held_records)]
        and held_archived == archived[: len(held_archived)]
        and (held_meta is None or held_meta == meta)
    )
    return Held(_session_digest(held_records, held_archived, held_meta), behind)


# ---- memory files, tokens, inbox entries ------------------------------------------------------------------------


async def _copy_memory_files(run: _Run, data_dir: Path, auth_dir: Path) -> None:
    files, target = FileMemoryStore(data_dir, auth_dir), run.target.memory
    recorded = await run.target.ledger.digests("memory_files")
    present = {_memory_item(n) for n in await target.names()}
    for name in await asyncio.to_thread(lambda: list(memory_names(data_dir, auth_dir))):
        text, item_id = await files.read(name), _memory_item(name)
        held = Held(digest_of(await target.read(name)) if item_id in present else None)

        async def write(name: MemoryName = name, text: str = text) -> None:
            await target.write(name, text)

        item = Checked("memory_files", item_id, digest_of(text), {"memory_files": 1})
        await run.settle(item, held, recorded.get(item_id), write, f"copied memory file {item_id}")


def _memory_item(name: MemoryName) -> str:
    return "/".join((name.kind, name.agent, name.chat, name.person, ".bak" if name.backup else ""))


async def _copy_tokens(run: _Run, auth_dir: Path) -> None:
    target = run.target.tokens
    recorded = await run.target.ledger.digests("tokens")
    held_tokens = {t.name: t for t in await target.stored()}
    for token in await asyncio.to_thread(TokenStore(auth_dir).stored):
        held = held_tokens.get(token.name)

        async def write(token: StoredToken = token, replaces: bool = held is not None) -> None:
            if replaces:  # the copy the database still holds as it was; the files' token is a new one
                await target.revoke(token.name)
            await target.add(token)

        item = Checked("tokens", token.name, _token_digest(token), {"tokens": 1})
        held_digest = Held(None if held is None else _token_digest(held))
        await run.settle(item, held_digest, recorded.get(token.name), write, f"copied token {token.name}")


def _token_digest(token: StoredToken) -> str:
    return digest_of([token.name, token.sha256, token.created_at])


async def _copy_inbox(run: _Run, data_dir: Path) -> None:
    target = run.target.inbox
    recorded = await run.target.ledger.digests("inbox")
    held_entries = {e.id: e for e in await target.unsettled()}
    inbox = FileInbox(data_dir)
    try:
        for entry in await inbox.unsettled():
            held = held_entries.get(entry.id)

            item = Checked("inbox", entry.id, _entry_digest(entry), {"inbox": 1})

            async def write(entry: InboxEntry = entry, digest: str = item.digest) -> None:
                # restored and recorded in one transaction: a COPYING mark with nothing held means "never
                # restored", since a restored entry leaves the database only by being answered
                await run.target.ledger.write_and_record(
                    "inbox", entry.id, digest, functools.partial(target.restore_on, entry=entry)
                )

            held_digest = Held(None if held is None else _entry_digest(held))
            copied = f"copied inbox entry {entry.id}"
            await run.settle(item, held_digest, recorded.get(entry.id), write, copied, records_itself=True)
    finally:
        await inbox.aclose()


def _entry_digest(entry: InboxEntry) -> str:
    return digest_of([entry.source, entry.accepted_at, entry.payload])


async def _copy_jobs(run: _Run, data_dir: Path) -> None:
    target = run.target.jobs
    recorded = await run.target.ledger.digests("jobs")
    held_jobs = {_job_item(d): d for d in await target.load_all()}
    for document in await FileJobDocuments(data_dir, durable=False).load_all():
        name = _job_item(document)
        held = held_jobs.get(name)

        async def write(document: JobDocument = document) -> None:
            await target.put(document)

        item = Checked("jobs", name, _job_digest(document), {"jobs": 1})
        held_digest = Held(None if held is None else _job_digest(held))
        await run.settle(item, held_digest, recorded.get(name), write, f"copied job {name}")


def _job_item(document: JobDocument) -> str:
    return f"{document.agent}/{document.job_id}"


def _job_digest(document: JobDocument) -> str:
    return digest_of([document.agent, document.job_id, document.next_due, document.text])


async def _copy_usage(run: _Run, database: Database, data_dir: Path) -> None:
    recorded = await run.target.ledger.digests("usage_days")
    for day, rows in (await copy_usage.file_days(data_dir)).items():
        held = await copy_usage.held_day(database, day)
        item = Checked("usage_days", day, digest_of(rows), {"usage_days": 1})

        async def write(day: str = day, rows: list[list[Any]] = rows, digest: str = item.digest) -> None:
            await run.target.ledger.write_and_record("usage_days", day, digest, copy_usage.write_day(day, rows))

        held_digest = Held(None if held is None else digest_of(held))
        copied = f"copied usage of {day}"
        await run.settle(item, held_digest, recorded.get(day), write, copied, records_itself=True)


async def _copy_forget_marks(run: _Run, database: Database, data_dir: Path) -> None:
    recorded = await run.target.ledger.digests("usage_forget_marks")
    for mark in await asyncio.to_thread(copy_usage.file_marks, data_dir):
        name = copy_usage.mark_item(mark)
        held = await copy_usage.held_mark(database, mark)
        item = Checked("usage_forget_marks", name, digest_of(copy_usage.mark_value(mark)), {"usage_forget_marks": 1})

        async def write(name: str = name, mark: ForgetMark = mark, digest: str = item.digest) -> None:
            await run.target.ledger.write_and_record("usage_forget_marks", name, digest, copy_usage.write_mark(mark))

        held_digest = Held(None if held is None else digest_of(held))
        await run.settle(
            item, held_digest, recorded.get(name), write, "copied a usage forget mark", records_itself=True
        )


async def _copy_idempotency(run: _Run, database: Database, data_dir: Path, window_s: float) -> None:
    recorded = await run.target.ledger.digests("idempotency")
    for data in await asyncio.to_thread(copy_usage.live_keys, data_dir, window_s):
        name = copy_usage.key_item(data)
        held = await copy_usage.held_key(database, name)
        item = Checked("idempotency", name, digest_of(copy_usage.key_value(data)), {"idempotency": 1})

        async def write(name: str = name, data: dict[str, Any] = data, digest: str = item.digest) -> None:
            await run.target.ledger.write_and_record("idempotency", name, digest, copy_usage.write_key(data))

        held_digest = Held(None if held is None else digest_of(held))
        await run.settle(item, held_digest, recorded.get(name), write, "copied idempotency key", records_itself=True)


async def _held_usage_or_key(database: Database, item: Checked) -> str | None:
    held: list[Any] | None
    if item.kind == "usage_days":
        held = await copy_usage.held_day(database, item.item)
    elif item.kind == "usage_forget_marks":
        held = await copy_usage.held_mark(database, _mark_of(item.item))
    else:
        held = await copy_usage.held_key(database, item.item)
    return None if held is None else digest_of(held)


def _mark_of(item: str) -> ForgetMark:
    channel, tag, agents, chat, at = json.loads(item)
    return ForgetMark(channel, tag, tuple(agents), chat, float(at))


def _agents(data_dir: Path) -> list[str]:
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


def memory_names(data_dir: Path, auth_dir: Path) -> Iterator[MemoryName]:
    """Every memory file of design §4 that exists, by its name (and each one's `.bak`)."""
    for name in _primary_memory_names(data_dir, auth_dir):
        yield name
    for path, name in _backups(data_dir, auth_dir):
        if path.is_file():
            yield name


def _primary_memory_names(data_dir: Path, auth_dir: Path) -> Iterator[MemoryName]:
    for agent in _agents(data_dir):
        memory_dir = data_dir / agent / "memory"
        if (memory_dir / "MEMORY.md").is_file():
            yield MemoryName.agent_memory(agent)
        if (memory_dir / L3_STATE_FILE).is_file():
            yield MemoryName.l3_state(agent)
        for path in _files(memory_dir / "chats", ".md"):
            yield from _named("chat_memory", agent=agent, chat=path.stem)
    if (auth_dir / "USER.md").is_file():
        yield MemoryName.shared_profile()
    for path in _files(auth_dir / "users", ".md"):
        person = key_from_file_stem(path.stem)
        if person is not None:
            yield from _named("private_profile", agent=person.agent, person=path.stem)
    group_dir = auth_dir / "users" / "group"
    for chat_dir in sorted(group_dir.iterdir()) if group_dir.is_dir() else []:
        for path in _files(chat_dir, ".md") if chat_dir.is_dir() and not chat_dir.is_symlink() else []:
            person = key_from_file_stem(path.stem)
            if person is not None:
                yield from _named("group_profile", agent=person.agent, chat=chat_dir.name, person=path.stem)


def _named(kind: MemoryKind, *, agent: str, chat: str = "", person: str = "") -> Iterator[MemoryName]:
    """The name of a file found on disk; none for a file name this product never made (an invalid part)."""
    with contextlib.suppress(InvalidIdError):
        yield MemoryName(kind, agent=agent, chat=chat, person=person)


def _backups(data_dir: Path, auth_dir: Path) -> Iterator[tuple[Path, MemoryName]]:
    files = FileMemoryStore(data_dir, auth_dir)
    for name in list(_primary_memory_names(data_dir, auth_dir)):
        if name.kind != "l3_state":
            backup = name.backup_name()
            yield files.path_of(backup), backup


def _files(directory: Path, suffix: str) -> list[Path]:
    if not directory.is_dir() or directory.is_symlink():
        return []
    return [p for p in sorted(directory.iterdir()) if p.suffix == suffix and p.is_file() and not p.is_symlink()]
