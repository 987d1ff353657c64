"""`store migrate`'s items beside sessions and memory: tokens, inbox entries, jobs, usage days, idempotency keys."""

from __future__ import annotations

import asyncio
import functools
import json
from pathlib import Path
from typing import Any

from agenthub.storage import copy_usage
from agenthub.storage.copy_run import Checked, CopyRun, Held, digest_of
from agenthub.storage.inbox import FileInbox, InboxEntry
from agenthub.storage.jobs import FileJobDocuments, JobDocument
from agenthub.storage.postgres.database import Database
from agenthub.storage.tokens import StoredToken, TokenStore
from agenthub.storage.usage_marks import ForgetMark


async def copy_tokens(run: CopyRun, auth_dir: Path) -> None:
    target = run.target.tokens
    recorded = await run.target.ledger.digests("tokens")
    held_tokens = {t.name: t for t in await target.stored()}
    for token in await asyncio.to_thread(TokenStore(auth_dir).stored):
        held = held_tokens.get(token.name)

        async def write(token: StoredToken = token, replaces: bool = held is not None) -> None:
            if replaces:  # the copy the database still holds as it was; the files' token is a new one
                await target.revoke(token.name)
            await target.add(token)

        item = Checked("tokens", token.name, token_digest(token), {"tokens": 1})
        held_digest = Held(None if held is None else token_digest(held))
        await run.settle(item, held_digest, recorded.get(token.name), write, f"copied token {token.name}")


def token_digest(token: StoredToken) -> str:
    return digest_of([token.name, token.sha256, token.created_at])


async def copy_inbox(run: CopyRun, data_dir: Path) -> None:
    target = run.target.inbox
    recorded = await run.target.ledger.digests("inbox")
    held_entries = {e.id: e for e in await target.unsettled()}
    inbox = FileInbox(data_dir)
    try:
        for entry in await inbox.unsettled():
            held = held_entries.get(entry.id)

            item = Checked("inbox", entry.id, entry_digest(entry), {"inbox": 1})

            async def write(entry: InboxEntry = entry, digest: str = item.digest) -> None:
                # restored and recorded in one transaction: a COPYING mark with nothing held means "never
                # restored", since a restored entry leaves the database only by being answered
                await run.target.ledger.write_and_record(
                    "inbox", entry.id, digest, functools.partial(target.restore_on, entry=entry)
                )

            held_digest = Held(None if held is None else entry_digest(held))
            copied = f"copied inbox entry {entry.id}"
            await run.settle(item, held_digest, recorded.get(entry.id), write, copied, records_itself=True)
    finally:
        await inbox.aclose()


def entry_digest(entry: InboxEntry) -> str:
    return digest_of([entry.source, entry.accepted_at, entry.payload])


async def copy_jobs(run: CopyRun, data_dir: Path) -> None:
    target = run.target.jobs
    recorded = await run.target.ledger.digests("jobs")
    held_jobs = {job_item(d): d for d in await target.load_all()}
    for document in await FileJobDocuments(data_dir, durable=False).load_all():
        name = job_item(document)
        held = held_jobs.get(name)

        async def write(document: JobDocument = document) -> None:
            await target.put(document)

        item = Checked("jobs", name, job_digest(document), {"jobs": 1})
        held_digest = Held(None if held is None else job_digest(held))
        await run.settle(item, held_digest, recorded.get(name), write, f"copied job {name}")


def job_item(document: JobDocument) -> str:
    return f"{document.agent}/{document.job_id}"


def job_digest(document: JobDocument) -> str:
    return digest_of([document.agent, document.job_id, document.next_due, document.text])


async def copy_usage_days(run: CopyRun, database: Database, data_dir: Path) -> None:
    recorded = await run.target.ledger.digests("usage_days")
    for day, rows in (await copy_usage.file_days(data_dir)).items():
        held = await copy_usage.held_day(database, day)
        item = Checked("usage_days", day, digest_of(rows), {"usage_days": 1})

        async def write(day: str = day, rows: list[list[Any]] = rows, digest: str = item.digest) -> None:
            await run.target.ledger.write_and_record("usage_days", day, digest, copy_usage.write_day(day, rows))

        held_digest = Held(None if held is None else digest_of(held))
        copied = f"copied usage of {day}"
        await run.settle(item, held_digest, recorded.get(day), write, copied, records_itself=True)


async def copy_forget_marks(run: CopyRun, database: Database, data_dir: Path) -> None:
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


async def copy_idempotency(run: CopyRun, database: Database, data_dir: Path, window_s: float) -> None:
    recorded = await run.target.ledger.digests("idempotency")
    for data in await asyncio.to_thread(copy_usage.live_keys, data_dir, window_s):
        name = copy_usage.key_item(data)
        held = await copy_usage.held_key(database, name)
        item = Checked("idempotency", name, digest_of(copy_usage.key_value(data)), {"idempotency": 1})

        async def write(name: str = name, data: dict[str, Any] = data, digest: str = item.digest) -> None:
            await run.target.ledger.write_and_record("idempotency", name, digest, copy_usage.write_key(data))

        held_digest = Held(None if held is None else digest_of(held))
        await run.settle(item, held_digest, recorded.get(name), write, "copied idempotency key", records_itself=True)


async def held_usage_or_key(database: Database, item: Checked) -> str | None:
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
