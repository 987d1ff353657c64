"""The durable inbox: every accepted message is stored before the platform is acknowledged, until it is answered."""

from __future__ import annotations

import asyncio
import base64
import copy
import dataclasses
import functools
import itertools
import time
import uuid
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from agenthub import jsonsafe
from agenthub.aio import run_to_end, succeeded
from agenthub.errors import PathRefusedError, StorageError
from agenthub.messages import Attachment, InboundMessage
from agenthub.storage import jsonl
from agenthub.storage.atomic import atomic_write_bytes
from agenthub.storage.history_writer import HistoryWriter, Landed
from agenthub.storage.session_files import ROOT

if TYPE_CHECKING:
    from agenthub.storage.ports import Liveness

log = structlog.get_logger(__name__)

JournalRecord = dict[str, Any]

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
    """The live entries of an inbox in acceptance order, with the next sequence number, and by session (each
    turn asks for its session's earlier ones: their number, not the whole inbox's, is the cost)."""

    def __init__(self) -> None:
        self.live: dict[str, InboxEntry] = {}
        self._by_session: dict[str, dict[str, InboxEntry]] = {}
        self._seq = itertools.count(1)

    def _put(self, entry: InboxEntry) -> None:
        self.live[entry.id] = entry
        if entry.session is not None:
            self._by_session.setdefault(entry.session, {})[entry.id] = entry

    def new(self, source: str, payload: dict[str, Any], now: float, session: str | None) -> InboxEntry:
        entry = InboxEntry(uuid.uuid4().hex, next(self._seq), now, source, payload, session)
        self._put(entry)
        return entry

    def assign(self, entry_id: str, session: str) -> None:
        entry = self.live.get(entry_id)
        if entry is not None and entry.session is None:
            self._put(dataclasses.replace(entry, session=session))

    def pop(self, entry_id: str) -> InboxEntry | None:
        """The live entry `entry_id`, no longer live (None when it was not)."""
        entry = self.live.pop(entry_id, None)
        if entry is not None and entry.session is not None:
            same = self._by_session.get(entry.session)
            if same is not None:
                same.pop(entry_id, None)
                if not same:
                    del self._by_session[entry.session]
        return entry

    def earlier(self, session: str, entry_id: str) -> list[str]:
        target = self.live.get(entry_id)
        if target is None:
            return []
        found = [e for e in self._by_session.get(session, {}).values() if e.seq < target.seq]
        return [e.id for e in sorted(found, key=lambda e: e.seq)]

    def restore(self, entry: InboxEntry) -> None:
        if entry.id not in self.live:
            self._put(entry)
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

    async def owners_alive(self, entry_ids: Collection[str]) -> bool | None:
        return None  # one process: no other instance has them

    async def settle(self, entry_id: str) -> None:
        self._entries.pop(entry_id)

    async def release(self, entry_id: str) -> None:
        return None  # one process: the entry stays its own

    async def still_mine(self, entry_id: str) -> bool:
        return True

    def accept_only_while(self, liveness: Liveness) -> None:
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
    """The inbox of the files mode: a journal `data/.inbox.jsonl` of `accept` and `settle` records, appended through
    the data directory's group commit (`HistoryWriter`, shared with the histories: an accept, a settle and the
    history lines waiting at the same moment are one thread hop, one commit-log write and one fdatasync), and
    compacted to the unsettled entries when it has grown long. Loading is idempotent (an entry written twice by a
    compaction is one entry; a settle removes it), and an unreadable entry is logged and dropped, never fatal.
    Without a `writer` it opens its own over `data_dir` (then no other writer of that directory may run in this
    process: tools that only read or compact the journal). `compact_slack`: `COMPACT_SLACK` unless given."""

    def __init__(
        self,
        data_dir: Path,
        *,
        fsync: bool = True,
        clock: Callable[[], float] = time.time,
        writer: HistoryWriter | None = None,
        compact_slack: int | None = None,
    ) -> None:
        self._entries = _Entries()
        self._clock = clock
        self.path = data_dir / INBOX_FILE
        self._owns_writer = writer is None
        self._writer = writer if writer is not None else HistoryWriter(data_dir, fsync=fsync)
        self._unwritten: set[str] = set()
        """Accepted entries whose record waits for its batch: a compaction meanwhile leaves them to that batch."""
        self._lines = 0
        self._slack = COMPACT_SLACK if compact_slack is None else compact_slack
        self._compacting = False
        self._settles = SettleRetry(self._write_settle)
        self._writer.recover_blocking()  # what the commit log acknowledged is in the journal before it is read
        self._load(self._read())

    def _read(self) -> list[JournalRecord]:
        """Every whole record of the journal (blocking; at construction). Torn or corrupt lines are skipped."""
        try:
            data = jsonl.read_bytes_no_follow(self.path)
        except FileNotFoundError:
            return []
        except PathRefusedError:  # a planted link is never read; the next compaction replaces it by a real file
            log.warning("journal_link_refused", path=str(self.path))
            return []
        records: list[JournalRecord] = []
        for raw in data.splitlines():
            try:
                record = jsonsafe.loads(raw)
            except ValueError:
                log.warning("journal_line_skipped", path=str(self.path))
                continue
            if isinstance(record, dict):
                records.append(record)
        self._lines = len(records)
        return records

    def _load(self, records: list[JournalRecord]) -> None:
        settled = {str(r.get("id")) for r in records if r.get("op") == "settle"}
        for record in records:
            if record.get("op") != "accept" or str(record.get("id")) in settled:
                continue
            try:
                entry = _entry_from_record(record)
            except (ValueError, KeyError, TypeError):
                log.warning("inbox_entry_unreadable", path=str(self.path))
                continue
            self._entries.restore(entry)

    async def accept(self, source: str, payload: dict[str, Any], *, session: str | None = None) -> InboxEntry:
        entry = self._entries.new(source, payload, self._clock(), session)
        self._unwritten.add(entry.id)
        write = asyncio.ensure_future(self._write(_record_of(entry), functools.partial(self._accept_landed, entry.id)))
        try:
            await run_to_end(write)  # a cancelled caller must not forget an entry whose write still lands
        except BaseException:
            if not succeeded(write):
                self._entries.pop(entry.id)  # not durable: not accepted (the platform retries)
            raise
        finally:
            self._unwritten.discard(entry.id)
        await self._compact_if_long()
        return entry

    def _accept_landed(self, entry_id: str, error: BaseException | None) -> None:
        """Before any compaction can run: a landed record is the file's (kept by a rewrite), a refused one is not
        accepted (nowhere on disk, left out of the rewrite too)."""
        self._unwritten.discard(entry_id)
        if error is not None:
            self._entries.pop(entry_id)

    async def _write(self, record: JournalRecord, landed: Landed | None = None) -> None:
        """Append `record`, durable (with fsync) when it returns: StorageError (nothing of it kept) when refused."""
        try:
            await self._writer.append(ROOT, INBOX_FILE, _encode(record), landed=landed)
        except OSError as e:
            raise StorageError("could not write the inbox journal") from e
        self._lines += 1

    async def assign(self, entry_id: str, session: str) -> None:
        """In memory only: one instance answers this journal, and after a restart each resumed entry is routed
        (so assigned) again before its turn runs."""
        self._entries.assign(entry_id, session)

    async def earlier_unsettled(self, session: str, entry_id: str) -> list[str]:
        return self._entries.earlier(session, entry_id)

    async def owners_alive(self, entry_ids: Collection[str]) -> bool | None:
        return None  # one process: no other instance has them

    async def settle(self, entry_id: str) -> None:
        """Gone from the live entries at once; a refused write is retried until the journal takes it (a compaction
        meanwhile writes the live entries only, which settles it too)."""
        if self._entries.pop(entry_id) is not None:
            try:
                await self._write_settle(entry_id)
            except StorageError:
                self._settles.refused(entry_id)
                raise
            await self._compact_if_long()

    async def _write_settle(self, entry_id: str) -> None:
        await self._write({"op": "settle", "id": entry_id})

    async def _compact_if_long(self) -> None:
        if self._compacting or self._lines <= 2 * len(self._entries.live) + self._slack:
            return
        try:
            await self.drop_settled()
        except StorageError:  # the appended journal is still complete; this compaction was only housekeeping
            log.warning("journal_compaction_failed", path=str(self.path))

    async def release(self, entry_id: str) -> None:
        return None  # one instance per data directory: it stays unsettled, answered after the restart

    async def still_mine(self, entry_id: str) -> bool:
        return True

    def accept_only_while(self, liveness: Liveness) -> None:
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
        """Rewrite the journal to the unsettled entries now (settled entries stay in it until then): atomically,
        between the writer's batches, after its checkpoint (so no older log entry is replayed onto the new file);
        an entry whose record still waits for its batch is left to that batch (a record whose append fails is then
        nowhere on disk). StorageError when refused."""
        self._compacting = True
        try:
            self._lines = await self._writer.exclusive_built(ROOT, INBOX_FILE, self._rewrite)
        except OSError as e:
            raise StorageError("could not rewrite the inbox journal") from e
        finally:
            self._compacting = False

    def _rewrite(self) -> Callable[[], int]:
        """The rewrite of the entries as they are now, between the writer's batches (on the event loop)."""
        live = [_record_of(e) for e in self._entries.ordered() if e.id not in self._unwritten]
        data, durable = b"".join(map(_encode, live)), self._writer.fsync

        def rewrite() -> int:
            atomic_write_bytes(self.path, data, durable=durable)
            return len(live)

        return rewrite

    async def aclose(self) -> None:
        await self._settles.aclose()
        if self._owns_writer:
            await self._writer.aclose()


COMPACT_SLACK = 10_000
"""The journal is compacted once it holds this many records more than twice the unsettled entries: every
compaction checkpoints the commit log (the history files synced), so it is rare (a few MB of journal)."""


def _encode(record: JournalRecord) -> bytes:
    """One journal line; a lone surrogate (a platform's extras may hold one) kept as its escape (`utf8_dumps`)."""
    return jsonsafe.utf8_dumps(record, compact=True).encode("utf-8") + b"\n"


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
