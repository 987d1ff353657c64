"""`PostgresSessionStore`: the `SessionStore` on PostgreSQL. Each call is one transaction (an unfenced append is
one statement); records are ordered by a per-session sequence kept in `session_heads`, whose row lock also
serialises two writers of one session. A session fenced by a lease's token (`fence`) is written under it: each
write checks `session_fences` under the session's advisory lock and is refused when a newer lease fenced it (the
hot three, the append, the meta and the fence itself, as one call of a function of migration 13: one round trip
each)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import structlog
from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from agenthub import jsonsafe
from agenthub.errors import InvalidIdError, StorageError
from agenthub.session_keys import SessionKey
from agenthub.storage.json_text import json_text
from agenthub.storage.lease import Lease, SessionClaim
from agenthub.storage.meta import SessionMeta
from agenthub.storage.ports.inbox import AnswerSettles
from agenthub.storage.postgres.appends import Append, Appended, write_appends
from agenthub.storage.postgres.batches import Batches
from agenthub.storage.postgres.claims import ClaimAsk, Claims
from agenthub.storage.postgres.database import Database, open_database
from agenthub.storage.postgres.let_go import LetGo, LetGos
from agenthub.storage.postgres.memory_clock import MemoryClock
from agenthub.storage.postgres.session_copies import Copy, SessionCopies
from agenthub.storage.store import (
    FencedWriteError,
    HistoryRecord,
    MalformedRecordError,
    SessionActivity,
    check_records,
)
from agenthub.storage.usage import ClaimRide

log = structlog.get_logger(__name__)

KEY = "agent = %(agent)s AND channel = %(channel)s AND chat_id = %(chat_id)s"

_APPEND = """
WITH head AS (
    INSERT INTO session_heads AS h (agent, channel, chat_id, next_seq, changed_at)
    VALUES (%(agent)s, %(channel)s, %(chat_id)s, %(count)s, now())
    ON CONFLICT (agent, channel, chat_id)
    DO UPDATE SET next_seq = h.next_seq + EXCLUDED.next_seq, changed_at = EXCLUDED.changed_at
    RETURNING born, next_seq
),
added AS (
    INSERT INTO session_records (agent, channel, chat_id, seq, record)
    SELECT %(agent)s, %(channel)s, %(chat_id)s, head.next_seq - %(count)s + t.ord - 1, t.record::json
    FROM head, unnest(%(records)s::text[]) WITH ORDINALITY AS t(record, ord)
)
SELECT born, next_seq FROM head
"""
"""One statement, so one transaction: the head's new `next_seq` and every record land together or not at all; the
history's version after it comes back."""

_ARCHIVE = f"""
INSERT INTO session_archive (agent, channel, chat_id, seq, record)
SELECT %(agent)s, %(channel)s, %(chat_id)s,
       coalesce((SELECT max(seq) FROM session_archive WHERE {KEY}), -1) + t.ord, t.record::json
FROM unnest(%(records)s::text[]) WITH ORDINALITY AS t(record, ord)
"""

_NEWEST_RECORD = f"(SELECT record::text FROM session_records WHERE {KEY} ORDER BY seq DESC LIMIT 1)"
"""The newest record as written, its `timestamp` read here: the database's JSON operators refuse the whole record
when any of its texts holds a lone surrogate's escape (`json_text`)."""
_LOAD = f"""
SELECT NULL::bigint, born, next_seq, NULL::text FROM session_heads WHERE {KEY}
UNION ALL
SELECT seq, NULL, NULL, record::text FROM session_records
WHERE {KEY} AND (seq >= %(since)s OR NOT EXISTS (SELECT 1 FROM session_heads WHERE {KEY} AND born = %(born)s))
ORDER BY 1 NULLS FIRST
"""
"""The history's version (born, next_seq) and its records from `since` on: all of them when its generation is not
`born` (rewritten or started again since). One statement, so one snapshot: the records are those of the version."""
_NEW_GENERATION = f"UPDATE session_heads SET born = nextval('session_born') WHERE {KEY}"
_READ_ARCHIVE = f"SELECT record::text FROM session_archive WHERE {KEY} ORDER BY seq"
_READ_META = f"SELECT meta::text, {_NEWEST_RECORD} FROM session_meta WHERE {KEY}"
_READ_FENCE = f"SELECT fence FROM session_fences WHERE {KEY}"
_CLAIM_RIDING = (
    "SELECT o_token, o_fence, o_born, o_next, o_meta, o_seq, o_record, o_scope, o_day, o_month, o_reserved "
    "FROM agenthub_session_claim_reserve_set(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::text[])"
)
"""`agenthub_session_claim` with a budget reservation riding in it (migrations 26 and 28), alone in its statement (the
claims without a ride go in batches: `claims.py`): the claim's rows, then the reservation's."""
FRESH_FOR_S = 2.0
"""How long what a claim read answers the `load` and `read_meta` that follow it (once each)."""
_FENCE = "SELECT agenthub_session_fence(%(agent)s, %(channel)s, %(chat_id)s, %(token)s)"
_WRITE_META = (
    "SELECT agenthub_session_write_meta(%(agent)s, %(channel)s, %(chat_id)s, %(token)s, %(meta)s, %(durable)s)"
)


def encode_records(records: Sequence[HistoryRecord]) -> list[str]:
    """The records as JSON texts; MalformedRecordError (nothing stored) for one that is not a history message."""
    check_records(records)
    texts = []
    for index, record in enumerate(records):
        try:
            texts.append(json_text(record))
        except (TypeError, ValueError):
            raise MalformedRecordError(f"record {index} cannot be stored as JSON") from None
    return texts


def decode_records(texts: Sequence[str], key: SessionKey) -> list[HistoryRecord]:
    """Parsed records; one that is not a JSON object is skipped and reported (like a torn JSONL line)."""
    records = []
    for text in texts:
        try:
            record = jsonsafe.loads(text)
        except ValueError:
            record = None
        if isinstance(record, dict):
            records.append(record)
        else:
            log.warning("history_record_skipped", session=str(key))
    return records


def _ridden(rows: list[Any]) -> tuple[list[Any], list[tuple[Any, ...]] | None]:
    """A riding claim's rows split: the claim's, and the reservation's (None: not made)."""
    at = len(rows)
    while at and rows[at - 1][7] is not None:  # the reservation's rows come last (each names its scope)
        at -= 1
    if at == len(rows):
        return rows, None
    return rows[:at], [tuple(row[7:]) for row in rows[at:]]


def _params(key: SessionKey, **more: Any) -> dict[str, Any]:
    return {"agent": key.agent, "channel": key.channel, "chat_id": key.chat_id, **more}


class PostgresSessionStore:
    """Session histories, archives and meta in the tables of migration 1 (`schema.SESSIONS`)."""

    def __init__(self, database: Database, memory_clock: MemoryClock | None = None) -> None:
        self.database = database
        self.memory_clock = MemoryClock() if memory_clock is None else memory_clock
        """Told the memory version each append brings back (shared with the instance's `PostgresMemoryStore`)."""
        self._appends: Batches[Append, Appended] = Batches(self._write_appends, "history-appends")
        """The appends of every session: those asked for while a batch is written go together in the next."""
        self._tokens: dict[SessionKey, int] = {}
        """The fencing token each session's writes carry now (while this instance holds its lease)."""
        self._fenced: dict[SessionKey, int] = {}
        """The last token this store fenced each session with: the same fence found again means nobody else
        fenced (so wrote) it since."""
        self._copies = SessionCopies()
        self.let_gos = LetGos(database)
        self.claims = Claims(database, self.let_gos)
        """The claims without a ride: those asked for while one batch is out go together in the next."""
        self._pending_meta: dict[SessionKey, SessionMeta] = {}
        """Metas written behind while this instance holds the session's lease: sent with the session's next append,
        or with the lease's release."""
        self._fresh_records: dict[SessionKey, tuple[float, list[HistoryRecord]]] = {}
        self._fresh_meta: dict[SessionKey, tuple[float, str | None, object]] = {}
        """What the claim of a session that moved read (until when it answers): its history, its meta and newest
        record's timestamp; taken by the next `load` / `read_meta`, dropped by any write or the lease's end."""
        self._answer_settles: AnswerSettles | None = None
        """The inbox whose entries `append_settling` settles with their answers (`settle_answers_of`)."""

    async def close(self) -> None:
        await self._appends.aclose()
        await self.claims.close()
        await self.let_gos.close()
        await self.database.close()

    async def load(self, key: SessionKey) -> list[HistoryRecord]:
        """The history: the copy this instance kept of it brought up to date with the records after its version
        (one small query when a session comes back), else read in full."""
        fresh = self._fresh_records.pop(key, None)
        if fresh is not None and time.monotonic() < fresh[0]:
            return fresh[1]  # decoded for this one read
        copy = self._copies.get(key)
        since, born = (copy.next_seq, copy.born) if copy is not None else (0, None)
        async with self.database.connection("read the session's history") as conn:
            cursor = await conn.execute(_LOAD, _params(key, since=since, born=born))
            rows = await cursor.fetchall()
        head = rows[0] if rows and rows[0][0] is None else None
        texts = [row[3] for row in rows[1:]] if head is not None else [row[3] for row in rows]
        if head is None:  # no history (never written, or cleared)
            self._copies.drop(key)
            return decode_records(texts, key)
        stored = self._caught_up(key, copy, int(head[1]), int(head[2]), texts)
        return await self.load(key) if stored is None else decode_records(stored, key)

    def claims_with(self, leases: object) -> bool:
        return getattr(leases, "database", None) is self.database

    async def claim(
        self, key: SessionKey, name: str, holder: str, ttl_s: float, *, ride: ClaimRide | None = None
    ) -> SessionClaim | None:
        """The lease and the fence in one round trip; the records written since this store's copy and the meta come
        with them and, when the session moved, answer the `load` and `read_meta` that follow (once, for a while).
        `ride`: a budget check and reservation made in the same statement once the lease is granted (its `rows`)."""
        copy = self._copies.get(key)
        since, born = (copy.next_seq, copy.born) if copy is not None else (0, None)
        if ride is None:  # with the claims of other sessions asked for meanwhile (`Claims`)
            rows = await self.claims.claim(ClaimAsk(name, holder, ttl_s, key, born, since))
        else:
            claiming = (name, holder, ttl_s, key.agent, key.channel, key.chat_id, born, since)
            rows = await self._claim_riding(claiming, ride)
        if not rows or rows[0][0] is None:
            return None
        head, texts = rows[0], [row[6] for row in rows[1:]]
        token = int(head[0])
        previous = None if head[1] is None else int(head[1])
        if previous is not None and previous > token:
            return SessionClaim(token, moved=True, fenced_out=True)
        moved = self._fenced_with(key, token, previous)
        stored = self._caught_up(key, copy, head[2], head[3], texts)
        if moved and stored is not None:
            records = decode_records(stored, key)
            until = time.monotonic() + FRESH_FOR_S
            self._fresh_records[key] = (until, records)
            self._fresh_meta[key] = (until, head[4], _newest_timestamp(records))
        return SessionClaim(token, moved, new=previous is None)

    async def _claim_riding(self, claiming: tuple[Any, ...], ride: ClaimRide) -> list[Any]:
        """The claim with `ride` in it, alone in its statement (migration 26): the claim's rows; the reservation's
        are the ride's."""
        await self.claims.given_back(claiming[0])  # a grant of it given back (a cancelled claim) let go first
        async with self.database.connection("claim the session") as conn:
            ride.sent = True
            cursor = await conn.execute(_CLAIM_RIDING, (*claiming, *ride.params))
            rows = await cursor.fetchall()
        claimed, ride.rows = _ridden(rows)
        return claimed

    def _caught_up(
        self, key: SessionKey, copy: Copy | None, born: int | None, next_seq: int | None, texts: list[str]
    ) -> list[str] | None:
        """The history's records (as stored) at (`born`, `next_seq`) from `copy` and the records read after it
        (every record when the generation changed), kept as the new copy; None when they do not add up (then it is
        read again)."""
        if born is None or next_seq is None:  # no history
            self._copies.drop(key)
            return []
        if copy is not None and copy.born == born:
            if next_seq - copy.next_seq != len(texts):
                self._copies.drop(key)
                return None
            stored = [*copy.texts, *texts]
        else:
            stored = list(texts)
        self._copies.put(key, born, next_seq, stored)
        return stored

    async def let_go(self, key: SessionKey, lease: Lease) -> None:
        """The lease's release and the meta written behind under its token: one statement (migration 19), shared
        with the let-gos of other sessions that come while one is out (`LetGos`)."""
        self._forget_fresh(key)
        pending, token = self._pending_meta.pop(key, None), self._tokens.pop(key, None)
        meta = None if pending is None or token != lease.token else json_text(pending.to_json())
        item = LetGo(lease.name, lease.token, key.agent, key.channel, key.chat_id, meta)
        if not await self.let_gos.let_go(item):  # with the let-gos of other sessions that come meanwhile
            log.info("session_meta_write_fenced", session_key=str(key))

    async def _write_pending_meta(self, key: SessionKey) -> None:
        """The meta written behind under the lease, before its token goes; a failure is logged (it is derivable)."""
        pending = self._pending_meta.pop(key, None)
        if pending is None:
            return
        try:
            await self._write_meta(key, pending, durable=False)
        except FencedWriteError:
            log.info("session_meta_write_fenced", session_key=str(key))
        except StorageError as e:
            log.warning("session_meta_write_failed", session_key=str(key), error=str(e))

    def _forget_fresh(self, key: SessionKey) -> None:
        self._fresh_records.pop(key, None)
        self._fresh_meta.pop(key, None)

    def _fenced_with(self, key: SessionKey, token: int, previous: int | None) -> bool:
        """Record the session fenced with `token` (`previous`: the fence found); whether it may have moved."""
        own = self._fenced.get(key)
        self._fenced[key] = self._tokens[key] = token
        return own is None or previous != own

    async def fence(self, key: SessionKey, token: int | None) -> bool:
        self._forget_fresh(key)
        if token is None:
            await self._write_pending_meta(key)
            self._tokens.pop(key, None)
            return False
        async with self.database.connection("fence the session") as conn:
            cursor = await conn.execute(_FENCE, _params(key, token=token))
            row = await cursor.fetchone()
        previous = None if row is None or row[0] is None else int(row[0])
        if previous is not None and previous > token:
            raise FencedWriteError()
        return self._fenced_with(key, token, previous)

    async def append(self, key: SessionKey, records: Sequence[HistoryRecord]) -> None:
        await self._append(key, records, None, None, ())

    async def append_letting_go(
        self, key: SessionKey, records: Sequence[HistoryRecord], meta: SessionMeta, lease: Lease
    ) -> bool:
        """`append` with `meta` written under the lease's token and, in the same statement, `lease` released (as
        `let_go`: only while still held with its token; nobody waits for its row, `appends.APPENDS`). Whether it was
        released (False: the append landed, the lease is still held: let it go the usual way). FencedWriteError,
        nothing written, when a newer lease fenced the session."""
        return await self._append(key, records, meta, lease, ())

    def settle_answers_of(self, inbox: AnswerSettles) -> None:
        """From now on `append_settling` deletes the entries of `inbox` it is given with their answer (those
        `inbox.owner` still owns) and tells `inbox` which it deleted (`settled_with_answer`)."""
        self._answer_settles = inbox

    async def append_settling(
        self,
        key: SessionKey,
        records: Sequence[HistoryRecord],
        settles: Sequence[str],
        *,
        meta: SessionMeta | None = None,
        lease: Lease | None = None,
    ) -> bool:
        """`append` (with `meta` and `lease`: `append_letting_go`) that also settles, in the same statement, the
        inbox entries `settles`, answered by these records being stored (`appends.APPENDS`): those the instance still
        owns, once the append landed. Without an inbox to settle in (`settle_answers_of`), a plain append: their
        settles follow as usual. Whether the lease was released."""
        return await self._append(key, records, meta, lease, settles if self._answer_settles is not None else ())

    async def _append(
        self,
        key: SessionKey,
        records: Sequence[HistoryRecord],
        meta: SessionMeta | None,
        lease: Lease | None,
        settles: Sequence[str],
    ) -> bool:
        texts = encode_records(records)
        if not texts:
            return False
        self._forget_fresh(key)
        pending = self._pending_meta.pop(key, None)  # a newer `meta`, the history's, holds what it changed
        newest = pending if meta is None else meta
        meta_text = None if newest is None else json_text(newest.to_json())
        token = self._tokens.get(key)
        name = None if lease is None or token != lease.token else lease.name
        stamp = time.monotonic()  # before the batch is sent: its snapshot is newer
        try:
            appended = await self._appends(Append(key, token, texts, meta_text, name, tuple(settles)))
        except BaseException:
            if pending is not None:  # not known to be written: it waits for the next append or the release again
                self._pending_meta.setdefault(key, pending)
            raise
        self.memory_clock.learnt(appended.memory_version, stamp)
        if appended.settled and self._answer_settles is not None:
            self._answer_settles.settled_with_answer(appended.settled)
        if appended.version is None:
            raise FencedWriteError()
        born, next_seq = appended.version
        self._copies.appended(key, int(born), int(next_seq), texts)
        if appended.released:  # let go: its writes carry no token from now on (as after `let_go`)
            self._tokens.pop(key, None)
            self._pending_meta.pop(key, None)
        return appended.released

    async def _write_appends(self, appends: list[Append]) -> list[Appended]:
        owner = self._answer_settles.owner if self._answer_settles is not None else None
        return await write_appends(self.database, appends, owner)

    async def replace(
        self, key: SessionKey, records: Sequence[HistoryRecord], *, archive: Sequence[HistoryRecord]
    ) -> None:
        texts, archived = encode_records(records), encode_records(archive)
        token = self._tokens.get(key)
        self._copies.drop(key)
        self._forget_fresh(key)
        async with self.database.connection("replace the history") as conn, conn.transaction():
            await _lock_fenced(conn, key, token)
            await _archive(conn, key, archived)
            await conn.execute(f"DELETE FROM session_records WHERE {KEY}", _params(key))
            await conn.execute(_NEW_GENERATION, _params(key))
            cursor = await conn.execute(_APPEND, _params(key, count=len(texts), records=texts))
            row = await cursor.fetchone()
        if row is not None:
            self._copies.put(key, int(row[0]), int(row[1]), list(texts))

    async def clear(self, key: SessionKey, *, archive: Sequence[HistoryRecord]) -> None:
        archived = encode_records(archive)
        token = self._tokens.get(key)
        self._copies.drop(key)
        self._forget_fresh(key)
        async with self.database.connection("clear the history") as conn, conn.transaction():
            await _lock_fenced(conn, key, token)
            await _archive(conn, key, archived)
            await conn.execute(f"DELETE FROM session_records WHERE {KEY}", _params(key))
            await conn.execute(f"DELETE FROM session_heads WHERE {KEY}", _params(key))

    async def read_archive(self, key: SessionKey) -> list[HistoryRecord]:
        async with self.database.connection("read the archive") as conn:
            cursor = await conn.execute(_READ_ARCHIVE, _params(key))
            rows = await cursor.fetchall()
        return decode_records([row[0] for row in rows], key)

    async def rewrite_archive(self, key: SessionKey, records: Sequence[HistoryRecord]) -> None:
        texts = encode_records(records)
        token = self._tokens.get(key)
        async with self.database.connection("rewrite the archive") as conn, conn.transaction():
            await _lock_fenced(conn, key, token)
            await conn.execute(f"DELETE FROM session_archive WHERE {KEY}", _params(key))
            await _archive(conn, key, texts)

    async def delete(self, key: SessionKey) -> bool:
        removed = 0
        token = self._tokens.get(key)
        self._copies.drop(key)
        self._forget_fresh(key)
        async with self.database.connection("delete the session") as conn, conn.transaction():
            if token is not None:
                await _lock_fenced(conn, key, token)
            for table in ("session_records", "session_heads", "session_archive", "session_meta"):  # the meta last
                cursor = await conn.execute(f"DELETE FROM {table} WHERE {KEY}", _params(key))
                removed += max(cursor.rowcount, 0)
        return removed > 0

    async def read_meta(self, key: SessionKey) -> SessionMeta | None:
        """The meta, its `updated_at` caught up with the newest record (a non-durable write may have been lost)."""
        pending = self._pending_meta.get(key)
        if pending is not None:
            return pending
        fresh = self._fresh_meta.pop(key, None)
        if fresh is not None and time.monotonic() < fresh[0]:
            meta_text, newest = fresh[1], fresh[2]
        else:
            async with self.database.connection("read the session's meta") as conn:
                cursor = await conn.execute(_READ_META, _params(key))
                row = await cursor.fetchone()
            meta_text, newest = (None, None) if row is None else (row[0], _timestamp_in(row[1]))
        if meta_text is None:
            return None
        try:
            meta = SessionMeta.from_json(jsonsafe.loads(meta_text))
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("meta_unreadable", session=str(key))
            return None
        if isinstance(newest, int | float) and not isinstance(newest, bool) and int(newest) > meta.updated_at:
            return meta.with_changes(updated_at=int(newest))
        return meta

    async def write_meta(self, key: SessionKey, meta: SessionMeta, *, durable: bool) -> None:
        """Written now; a meta written behind (not `durable`) of a session whose lease is held waits for the
        session's next append or the lease's end (`let_go`, `fence(key, None)`), and goes in the same round trip."""
        self._fresh_meta.pop(key, None)
        if not durable and key in self._tokens:
            self._pending_meta[key] = meta
            return
        self._pending_meta.pop(key, None)
        await self._write_meta(key, meta, durable=durable)

    async def _write_meta(self, key: SessionKey, meta: SessionMeta, *, durable: bool) -> None:
        params = _meta_params(key, self._tokens.get(key), meta, durable=durable)
        async with self.database.connection("write the session's meta") as conn:
            cursor = await conn.execute(_WRITE_META, params)
            row = await cursor.fetchone()
        if row is None or not row[0]:
            raise FencedWriteError()

    async def exists(self, key: SessionKey) -> bool:
        async with self.database.connection("look the session up") as conn:
            cursor = await conn.execute(
                f"SELECT EXISTS (SELECT 1 FROM session_heads WHERE {KEY}) "
                f"OR EXISTS (SELECT 1 FROM session_meta WHERE {KEY})",
                _params(key),
            )
            row = await cursor.fetchone()
        return bool(row and row[0])

    async def list_keys(self, agent: str) -> list[SessionKey]:
        return await self._keys_in(agent, ("session_heads", "session_meta"))

    async def keys_with_anything(self, agent: str) -> list[SessionKey]:
        return await self._keys_in(agent, ("session_heads", "session_meta", "session_archive"))

    async def _keys_in(self, agent: str, tables: tuple[str, ...]) -> list[SessionKey]:
        """`agent`'s sessions with a row in any of `tables` (fixed names, never input), in the files backend's order."""
        union = " UNION ".join(f"SELECT channel, chat_id FROM {table} WHERE agent = %(agent)s" for table in tables)
        async with self.database.connection("list the sessions") as conn:
            cursor = await conn.execute(union, {"agent": agent})
            rows = await cursor.fetchall()
        keys = [key for key in (_key(agent, row[0], row[1]) for row in rows) if key is not None]
        return sorted(keys, key=lambda k: k.file_stem)

    async def activity(self, agent: str) -> list[SessionActivity]:
        async with self.database.connection("list the sessions") as conn:
            cursor = await conn.execute(
                "SELECT channel, chat_id, extract(epoch FROM changed_at)::float8 FROM session_heads "
                "WHERE agent = %(agent)s ORDER BY changed_at DESC",
                {"agent": agent},
            )
            rows = await cursor.fetchall()
        found = ((_key(agent, row[0], row[1]), float(row[2])) for row in rows)
        return [SessionActivity(key, changed_at) for key, changed_at in found if key is not None]


def _meta_params(key: SessionKey, token: int | None, meta: SessionMeta, *, durable: bool) -> dict[str, Any]:
    return _params(key, token=token, meta=json_text(meta.to_json()), durable=durable)


def _timestamp_in(record_text: str | None) -> object:
    """The `timestamp` of a record as written (None: no record, or one that is not a JSON object)."""
    if record_text is None:
        return None
    try:
        record = jsonsafe.loads(record_text)
    except ValueError:
        return None
    return record.get("timestamp") if isinstance(record, dict) else None


def _newest_timestamp(records: list[HistoryRecord]) -> object:
    """The newest record's `timestamp` (what `_NEWEST_RECORD` holds), None without records."""
    return records[-1].get("timestamp") if records else None


def _key(agent: str, channel: str, chat_id: str) -> SessionKey | None:
    try:
        return SessionKey(agent, channel, chat_id)
    except InvalidIdError:  # a row written by hand: never a key the product would build
        return None


_SESSION_LOCK = (
    "SELECT pg_advisory_xact_lock(hashtextextended(%(agent)s || ':' || %(channel)s || ':' || %(chat_id)s, 0))"
)
"""The session's transaction lock: it exists with or without a head row (a cleared session has none)."""


async def _lock_head(conn: AsyncConnection[TupleRow], key: SessionKey) -> None:
    """Serialise this transaction with every other writer of the session's archive and records (any instance)."""
    await conn.execute(_SESSION_LOCK, _params(key))


async def _lock_fenced(conn: AsyncConnection[TupleRow], key: SessionKey, token: int | None) -> None:
    """`_lock_head`, then (for a write under a lease's `token`) refuse the whole transaction when a newer lease
    fenced the session: the check and the write it guards are serialised with every `fence` by the same lock."""
    await _lock_head(conn, key)
    if token is not None:
        fence = await _fence_of(conn, key)
        if fence is not None and fence > token:
            raise FencedWriteError()


async def _fence_of(conn: AsyncConnection[TupleRow], key: SessionKey) -> int | None:
    cursor = await conn.execute(_READ_FENCE, _params(key))
    row = await cursor.fetchone()
    return None if row is None else int(row[0])


async def _archive(conn: AsyncConnection[TupleRow], key: SessionKey, texts: list[str]) -> None:
    if texts:
        await conn.execute(_ARCHIVE, _params(key, records=texts))


async def postgres_store_factory(dsn: str, **options: Any) -> PostgresSessionStore:
    """A store on `dsn`, its schema migrated and its pool connected (`options` as `Database` takes them): what the
    composition root opens at start-up, so a bad DSN stops it with one clear line. `close()` it."""
    return PostgresSessionStore(await open_database(dsn, **options))


def lazy_postgres_store(dsn: str, **options: Any) -> PostgresSessionStore:
    """A store on `dsn` that migrates and connects on its first call (for code that cannot await at creation)."""
    return PostgresSessionStore(Database(dsn, **options))
