"""`agenthub store migrate --from files --to postgres`: copy a files deployment's state into PostgreSQL, item by
item: a session (history, archive, meta), a memory file, an API token, an unanswered inbox entry.

Idempotent and resumable: an item the database holds as the files do is left as it is, and a run cut short is
simply run again. Each item copied is recorded with a digest of what was written (`store_copies`), so a re-run never
overwrites what the database has changed since (a session answered on PostgreSQL, a memory file L3 rewrote, a
revoked token, a settled entry): that item is reported as skipped, with the reason. The verify compares each item
of the files with the database's copy, never whole tables (which other instances keep changing)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agenthub.storage.copy_memory import copy_memory_files, memory_item
from agenthub.storage.copy_run import Checked, CopyRun, Counts, Kind, Report, Target, digest_of
from agenthub.storage.copy_sessions import copy_sessions, held_session
from agenthub.storage.copy_state import (
    copy_forget_marks,
    copy_idempotency,
    copy_inbox,
    copy_jobs,
    copy_tokens,
    copy_usage_days,
    entry_digest,
    held_usage_or_key,
    job_digest,
    job_item,
    token_digest,
)


async def copy_files_to_postgres(data_dir: Path, auth_dir: Path, target: Target, report: Report) -> Counts:
    """Copy every session, memory file, API token, unanswered inbox entry and scheduled job the database does not
    hold yet, then verify each item of the files against the database's copy."""
    run = CopyRun(target, report)
    await copy_sessions(run, data_dir)
    await copy_memory_files(run, data_dir, auth_dir)
    await copy_tokens(run, auth_dir)
    await copy_inbox(run, data_dir)
    await copy_jobs(run, data_dir)
    if target.database is not None:
        await copy_usage_days(run, target.database, data_dir)
        await copy_forget_marks(run, target.database, data_dir)
        await copy_idempotency(run, target.database, data_dir, target.idempotency_window_s)
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
    memory = {memory_item(n): n for n in await target.memory.names()} if "memory_files" in kinds else {}
    tokens = {t.name: t for t in await target.tokens.stored()} if "tokens" in kinds else {}
    inbox = {e.id: e for e in await target.inbox.unsettled()} if "inbox" in kinds else {}
    jobs = {job_item(d): d for d in await target.jobs.load_all()} if "jobs" in kinds else {}
    for item in checked:
        digest: str | None = None
        if item.key is not None:
            digest = (await held_session(target.sessions, item.key, [], [], None)).digest
        elif item.kind == "memory_files" and item.item in memory:
            digest = digest_of(await target.memory.read(memory[item.item]))
        elif item.kind == "tokens" and item.item in tokens:
            digest = token_digest(tokens[item.item])
        elif item.kind == "inbox" and item.item in inbox:
            digest = entry_digest(inbox[item.item])
        elif item.kind == "jobs" and item.item in jobs:
            digest = job_digest(jobs[item.item])
        elif item.kind in ("usage_days", "usage_forget_marks", "idempotency") and target.database is not None:
            digest = await held_usage_or_key(target.database, item)
        if digest is not None:
            found[(item.kind, item.item)] = digest
    return found
