"""The durable inbox: every accepted message is stored before the platform is acknowledged, until it is answered."""

from __future__ import annotations

import asyncio
import base64
import copy
import dataclasses
import itertools
import time
import uuid
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from agenthub.aio import run_to_end, succeeded
from agenthub.errors import StorageError
from agenthub.messages import Attachment, InboundMessage
from agenthub.storage.journal import Journal, JournalRecord

log = structlog.get_logger(__name__)

INBOX_FILE = ".inbox.jsonl"


@dataclass(frozen=True)
class InboxEntry:
    """One accepted, not yet answered message; `seq` orders entries by acceptance. `source` names who resumes it
    after a crash (a channel instance, e.g. `wecom:app-1`), `payload` is what that source needs to answer it: the
    platform event for a push channel (its media is downloaded after the ack), `message_to_json()` for HTTP.
    `session` (`agent:channel:chat_id`) is known at once for HTTP, and assigned by the gateway for a push channel's
    message once it is routed: the session's arrival order is its entries' `seq` order."""

    id: str
    seq: int
    accepted_at: float
    source: str
    payload: dict[str, Any]
    session: str | None = None


def message_to_json(message: InboundMessage) -> dict[str, Any]:
    """A JSON-ready form of `message` (attachment bytes in base64)."""
    return {
        "channel": message.channel,
        "chat_id": message.chat_id,
        "sender_id": message.sender_id,
        "content": message.content,
        "message_id": message.message_id,
        "agent": message.agent,
        "cred_id": message.cred_id,
        "model_hint": message.model_hint,
        "provider_hint": message.provider_hint,
        "timestamp": message.timestamp,
        "metadata": message.metadata,
        "attachments": [
            {"kind": a.kind, "name": a.name, "mime_type": a.mime_type, "data": base64.b64encode(a.data).decode()}
            for a in message.attachments
        ],
    }


def message_from_json(data: dict[str, Any]) -> InboundMessage:
    """The message `message_to_json` stored; ValueError/KeyError/TypeError when it is not one."""
    attachments = tuple(
        Attachment(str(a["kind"]), str(a["name"]), str(a["mime_type"]), base64.b64decode(a["data"], validate=True))  # type: ignore[arg-type]
        for a in data.get("attachments", [])
    )
    for a in attachments:
        if a.kind not in ("image", "file"):
            raise ValueError("unknown attachment kind")
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise TypeError("metadata is not an object")
    return InboundMessage(
        channel=str(data["channel"]),
        chat_id=str(data["chat_id"]),
        sender_id=str(data["sender_id"]),
        content=str(data["content"]),
        message_id=str(data.get("message_id") or ""),
        agent=_optional_str(data.get("agent")),
        cred_id=_optional_str(data.get("cred_id")),
        model_hint=_optional_str(data.get("model_hint")),
        provider_hint=_optional_str(data.get("provider_hint")),
        timestamp=int(data["timestamp"]),
        metadata=metadata,
        attachments=attachments,
    )


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


SETTLE_RETRY_FIRST_S = 0.5
SETTLE_RETRY_MAX_S = 30.0


class SettleRetry:
    """The settles an inbox's store refused, written again by `write` with a bounded backoff (first, doubled, at
    most `max_s`) until it takes them, and at every `retry()`: an answered entry is not answered again after a
    restart just because the store was away when it was answered."""

    def __init__(
        self,
        write: Callable[[str], Awaitable[None]],
        *,
        first_s: float = SETTLE_RETRY_FIRST_S,
        max_s: float = SETTLE_RETRY_MAX_S,
    ) -> None:
        self._write = write
        self._first_s, self._max_s = first_s, max_s
        self.pending: dict[str, None] = {}
        """Entry ids in the order their settle was refused."""
        self._task: asyncio.Task[None] | None = None

    def refused(self, entry_id: str) -> None:
        log.warning("inbox_settle_retrying", entry_id=entry_id)
        self.pending[entry_id] = None
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="inbox-settle-retry")

    async def retry(self) -> None:
        """Write every pending settle, oldest first; StorageError (the rest kept) when the store still refuses."""
        for entry_id in list(self.pending):
            await self._write(entry_id)
            self.pending.pop(entry_id, None)
            log.info("inbox_settle_retried", entry_id=entry_id)

    async def _run(self) -> None:
        delay = self._first_s
        while self.pending:
            await asyncio.sleep(delay)
            try:
                await self.retry()
            except StorageError:
                delay = min(delay * 2, self._max_s)

    async def aclose(self) -> None:
        """Stop the background retries (what is still pending is answered again, and found answered, later)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])
        if self.pending:
            log.warning("inbox_settles_left", count=len(self.pending))


class _Entries:
    """The live entries of an inbox in acceptance order, with the next sequence number."""

    def __init__(self) -> None:
        self.live: dict[str, InboxEntry] = {}
        self._seq = itertools.count(1)

    def new(self, source: str, payload: dict[str, Any], now: float, session: str | None) -> InboxEntry:
        entry = InboxEntry(uuid.uuid4().hex, next(self._seq), now, source, payload, session)
        self.live[entry.id] = entry
        return entry

    def assign(self, entry_id: str, session: str) -> None:
        entry = self.live.get(entry_id)
        if entry is not None and entry.session is None:
            self.live[entry_id] = dataclasses.replace(entry, session=session)

    def earlier(self, session: str, entry_id: str) -> list[str]:
        target = self.live.get(entry_id)
        if target is None:
            return []
        found = [e for e in self.live.values() if e.session == session and e.seq < target.seq]
        return [e.id for e in sorted(found, key=lambda e: e.seq)]

    def restore(self, entry: InboxEntry) -> None:
        self.live.setdefault(entry.id, entry)
        self._seq = itertools.count(max(entry.seq + 1, next(self._seq)))

    def ordered(self) -> list[InboxEntry]:
        return sorted(self.live.values(), key=lambda e: e.seq)


class InMemoryInbox:
    """An inbox that lives as long as the process (tests, and the in-process `agenthub chat`)."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._entries = _Entries()
        self._clock = clock

    async def accept(self, source: str, payload: dict[str, Any], *, session: str | None = None) -> InboxEntry:
        return self._entries.new(source, copy.deepcopy(payload), self._clock(), session)

    async def assign(self, entry_id: str, session: str) -> None:
        self._entries.assign(entry_id, session)

    async def earlier_unsettled(self, session: str, entry_id: str) -> list[str]:
        return self._entries.earlier(session, entry_id)

    async def settle(self, entry_id: str) -> None:
        self._entries.live.pop(entry_id, None)

    async def release(self, entry_id: str) -> None:
        return None  # one process: the entry stays its own

    async def still_mine(self, entry_id: str) -> bool:
        return True

    def accept_only_while(self, alive: Callable[[], bool]) -> None:
        return None

    async def unsettled(self) -> list[InboxEntry]:
        return self._entries.ordered()

    async def orphan_sources(self) -> set[str]:
        return set()  # one process: nobody else's entries

    async def claim_orphans(self, sources: Collection[str]) -> list[InboxEntry]:
        return []

    async def retry_settles(self) -> None:
        return None

    def depth(self) -> int:
        return len(self._entries.live)

    async def count(self) -> int:
        return self.depth()

    async def drop_settled(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


class FileInbox:
    """The inbox of the files mode: a group-committed journal `data/.inbox.jsonl` of `accept` and `settle`
    records, compacted to the unsettled entries when it grows. Loading is idempotent (an entry written twice by a
    compaction is one entry; a settle removes it), and an unreadable entry is logged and dropped, never fatal."""

    def __init__(self, data_dir: Path, *, fsync: bool = True, clock: Callable[[], float] = time.time) -> None:
        self._entries = _Entries()
        self._clock = clock
        self._journal = Journal(data_dir / INBOX_FILE, snapshot=self._snapshot, fsync=fsync)
        self._settles = SettleRetry(self._write_settle)
        self._load(self._journal.read())

    def _load(self, records: list[JournalRecord]) -> None:
        settled = {str(r.get("id")) for r in records if r.get("op") == "settle"}
        for record in records:
            if record.get("op") != "accept" or str(record.get("id")) in settled:
                continue
            try:
                entry = _entry_from_record(record)
            except (ValueError, KeyError, TypeError):
                log.warning("inbox_entry_unreadable", path=str(self._journal.path))
                continue
            self._entries.restore(entry)

    def _snapshot(self) -> list[JournalRecord]:
        return [_record_of(e) for e in self._entries.ordered()]

    async def accept(self, source: str, payload: dict[str, Any], *, session: str | None = None) -> InboxEntry:
        entry = self._entries.new(source, payload, self._clock(), session)
        write = asyncio.ensure_future(self._journal.write(_record_of(entry)))
        try:
            await run_to_end(write)  # a cancelled caller must not forget an entry whose write still lands
        except BaseException:
            if not succeeded(write):
                self._entries.live.pop(entry.id, None)  # not durable: not accepted (the platform retries)
            raise
        return entry

    async def assign(self, entry_id: str, session: str) -> None:
        """In memory only: one instance answers this journal, and after a restart each resumed entry is routed
        (so assigned) again before its turn runs."""
        self._entries.assign(entry_id, session)

    async def earlier_unsettled(self, session: str, entry_id: str) -> list[str]:
        return self._entries.earlier(session, entry_id)

    async def settle(self, entry_id: str) -> None:
        """Gone from the live entries at once; a refused write is retried until the journal takes it (a compaction
        meanwhile writes the live entries only, which settles it too)."""
        if self._entries.live.pop(entry_id, None) is not None:
            try:
                await self._write_settle(entry_id)
            except StorageError:
                self._settles.refused(entry_id)
                raise

    async def _write_settle(self, entry_id: str) -> None:
        await self._journal.write({"op": "settle", "id": entry_id})

    async def release(self, entry_id: str) -> None:
        return None  # one instance per data directory: it stays unsettled, answered after the restart

    async def still_mine(self, entry_id: str) -> bool:
        return True

    def accept_only_while(self, alive: Callable[[], bool]) -> None:
        return None

    async def unsettled(self) -> list[InboxEntry]:
        return self._entries.ordered()

    async def orphan_sources(self) -> set[str]:
        return set()  # one instance per data directory: nobody else's entries

    async def claim_orphans(self, sources: Collection[str]) -> list[InboxEntry]:
        return []

    async def retry_settles(self) -> None:
        await self._settles.retry()

    def depth(self) -> int:
        return len(self._entries.live)

    async def count(self) -> int:
        return self.depth()

    async def drop_settled(self) -> None:
        """Settled entries stay in the journal until it is compacted; this compacts it now."""
        await self._journal.compact()

    async def aclose(self) -> None:
        await self._settles.aclose()
        await self._journal.aclose()


def _record_of(entry: InboxEntry) -> JournalRecord:
    record: JournalRecord = {
        "op": "accept",
        "id": entry.id,
        "seq": entry.seq,
        "at": entry.accepted_at,
        "source": entry.source,
        "payload": entry.payload,
    }
    if entry.session is not None:
        record["session"] = entry.session
    return record


def _entry_from_record(record: JournalRecord) -> InboxEntry:
    payload = record["payload"]
    if not isinstance(payload, dict):
        raise TypeError("payload is not an object")
    session = record.get("session")
    return InboxEntry(
        str(record["id"]),
        int(record["seq"]),
        float(record["at"]),
        str(record["source"]),
        payload,
        session if isinstance(session, str) else None,
    )
