"""`PostgresInbox`: the durable inbox shared by every instance. `accept` returns once its row is committed; the
sequence orders entries by acceptance; each entry is owned by the instance answering it (a survivor claims a dead
instance's entries); a settled entry's row is deleted."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from agenthub import jsonsafe
from agenthub.errors import StorageError
from agenthub.storage.inbox import InboxEntry, SettleRetry
from agenthub.storage.json_text import json_text
from agenthub.storage.lease import INSTANCE_LEASE_PREFIX
from agenthub.storage.ports import Liveness
from agenthub.storage.postgres.batches import Batches
from agenthub.storage.postgres.database import Database

_ACCEPTS = """
WITH accepted AS (
    INSERT INTO inbox (id, source, accepted_at, payload, session, owner)
    SELECT b.id, b.source, extract(epoch FROM now()), b.payload::json, b.session, %(owner)s
    FROM json_to_recordset(%(accepts)s::json) AS b(n integer, id text, source text, payload text, session text)
    ORDER BY b.n
    RETURNING id, seq, accepted_at, session, source
)
SELECT a.id, a.seq, a.accepted_at, NOT EXISTS (
    SELECT 1 FROM inbox i
    WHERE (i.session = a.session OR (i.session IS NULL AND i.source = a.source)) AND i.seq < a.seq
      AND NOT i.id = ANY(%(answered)s::text[])
) AND NOT EXISTS (
    SELECT 1 FROM accepted b
    WHERE (b.session = a.session OR (b.session IS NULL AND b.source = a.source)) AND b.seq < a.seq
) FROM accepted a
"""
"""The entries of a batch (`Batches`: the accepts asked for while the one before was written), in the order they
were asked for, in one statement (one commit); and for each, in the same round trip, whether it is alone: no
unsettled entry of its session (nor one of its source whose session is not named yet) came before it, in the table
or in the batch, but those this instance answered and has not deleted yet (`answered`: their settles are being
written). Entries only ever come after it from now on, and those before it only leave, so an entry accepted alone
needs no order check before its turn (`earlier_unsettled`). The entries go as one JSON parameter (`_accepts_json`):
text arrays cost psycopg a quoting pass in Python per element, the payloads' (JSON, full of quotes) most of all."""
_ASSIGN = "UPDATE inbox SET session = %(session)s WHERE id = %(id)s AND session IS NULL"
_EARLIER = """
WITH mine AS (UPDATE inbox SET owner = owner WHERE id = %(id)s AND owner = %(owner)s RETURNING 1)
SELECT id, seq FROM inbox
WHERE session = %(session)s AND seq < (SELECT seq FROM inbox WHERE id = %(id)s)
UNION ALL
SELECT NULL, NULL FROM mine
ORDER BY 2 NULLS FIRST
"""
"""Served by the index `(session, seq)` of migration 3; a settled (deleted) `id` compares with NULL: no rows. With
them, in the same round trip, whether `id` is still this owner's (`_STILL_MINE`: a row of NULLs, first)."""
MINE_CHECKED_FOR_S = 1.0
"""Without a liveness lease (tools, tests): how long the ownership seen answers the next `still_mine`, once."""
MINE_CHECKS_KEPT = 1_000
_RELEASE = "UPDATE inbox SET owner = NULL WHERE id = %(id)s AND owner = %(owner)s"
"""Only this owner's row: an entry another instance claimed meanwhile stays that instance's."""
_STILL_MINE = "UPDATE inbox SET owner = owner WHERE id = %(id)s AND owner = %(owner)s RETURNING 1"
"""An UPDATE, not a plain SELECT: it waits for a claim that holds the row, then sees that claim's owner."""
_UNSETTLED = (
    "SELECT id, seq, accepted_at, source, payload::text, session FROM inbox"
    " WHERE source LIKE %(prefix)s AND (%(owner)s::text IS NULL OR owner = %(owner)s) ORDER BY seq"
)
_ORPHANED = """
    (i.owner IS NULL OR NOT EXISTS (
        SELECT 1 FROM leases l WHERE l.name = %(lease_prefix)s || i.owner AND l.expires_at > now()
    ))
"""
"""An entry whose owner is gone: none, or its `instance:` lease is expired (released at a clean stop) or absent.
An instance never claims its own entries: they are in its `unsettled()` already."""
_OWNERS_ALIVE = f"SELECT EXISTS (SELECT 1 FROM inbox i WHERE i.id = ANY(%(ids)s) AND NOT {_ORPHANED})"
"""Whether one of the entries has an owner whose `instance:` lease is live (the orphans' test, negated)."""
_ORPHAN_SOURCES = f"SELECT DISTINCT i.source FROM inbox i WHERE i.owner IS DISTINCT FROM %(owner)s AND {_ORPHANED}"
_CLAIM = f"""
WITH orphans AS (
    SELECT i.seq FROM inbox i
    WHERE i.source = ANY(%(sources)s) AND i.owner IS DISTINCT FROM %(owner)s AND {_ORPHANED}
    ORDER BY i.seq
    FOR UPDATE SKIP LOCKED
)
UPDATE inbox SET owner = %(owner)s FROM orphans WHERE inbox.seq = orphans.seq
RETURNING inbox.id, inbox.seq, inbox.accepted_at, inbox.source, inbox.payload::text, inbox.session
"""
"""One statement: the rows are locked as they are picked, and a row another claimer holds is skipped (it is that
claimer's), so survivors claiming at the same moment split the orphans, never share one."""


@dataclass(frozen=True)
class _Accept:
    id: str
    source: str
    payload: str
    """As JSON text."""
    session: str | None


class _AlwaysHeld:
    """No liveness lease (tools, tests): accepts are never refused, and no hold outlasts a check."""

    held = True
    hold: int | None = None


@dataclass(frozen=True)
class _Seen:
    """Whether an entry was this owner's when last seen, in which hold of the liveness lease, and (without one)
    until when that answers."""

    mine: bool
    hold: int | None
    until: float


class PostgresInbox:
    """The `Inbox` on PostgreSQL for the instance `owner` (its lease holder): its accepts are its own, `unsettled`
    lists them, `claim_orphans` takes over those of a dead instance. Without an owner (`agenthub store migrate`,
    tools) every entry is listed. `depth()` is what this instance last saw (set by `unsettled`, moved by its own
    accepts and settles); `count()` asks the database.

    An entry seen to be this owner's (accepted, claimed, or checked by `earlier_unsettled`) stays so without a
    round trip while the instance's liveness lease keeps the hold it had then: another instance claims an entry
    only once its owner's lease has expired, and an expired lease held again is another hold. So the checks of a
    turn before it runs and after its answer is stored cost nothing beyond the order check."""

    def __init__(self, database: Database, *, owner: str | None = None) -> None:
        self.database = database
        self.owner = owner
        self._depth = 0
        self._settles = SettleRetry(self._delete)
        self._deletes: Batches[str, None] = Batches(self._delete_rows, "inbox-settles")
        self._accepts: Batches[_Accept, tuple[int, float, bool]] = Batches(self._insert_rows, "inbox-accepts")
        """The accepts: those asked for while one is written go together in the next statement."""
        """The settles: those asked for while one is written go together in the next statement."""
        self._liveness: Liveness = _AlwaysHeld()
        self._seen: dict[str, _Seen] = {}
        """Per entry looked at: whether it was this owner's (`_Seen`)."""
        self._answering: set[str] = set()
        """The entries whose settle is being written: answered, though their rows are still there."""
        self._alone: dict[str, str] = {}
        """The entries accepted here with nothing earlier in their session (`_ACCEPT`), each with its session."""
        self._settled_with_answer: dict[str, bool] = {}
        """The entries the session store deleted with their answer (`settled_with_answer`), oldest first: their
        `settle` sends nothing, once."""

    def accept_only_while(self, liveness: Liveness) -> None:
        self._liveness = liveness

    async def accept(self, source: str, payload: dict[str, Any], *, session: str | None = None) -> InboxEntry:
        hold = self._liveness.hold
        if not self._liveness.held:  # the others may think this instance dead: they would answer the entry too
            raise StorageError("this instance's liveness lease is not held: nothing is accepted")
        entry_id = uuid.uuid4().hex
        text = json_text(payload)
        seq, accepted_at, alone = await self._accepts(_Accept(entry_id, source, text, session))
        self._depth += 1
        if self.owner is not None:
            self._note_mine(entry_id, True, hold)
        if session is not None and alone:
            self._note_alone(entry_id, session)
        return InboxEntry(entry_id, seq, accepted_at, source, jsonsafe.loads(text), session)

    async def _insert_rows(self, accepts: list[_Accept]) -> list[tuple[int, float, bool]]:
        params = {
            "accepts": _accepts_json(accepts),
            "owner": self.owner,
            "answered": self._answered(),
        }
        async with self.database.connection("accept the message") as conn:
            cursor = await conn.execute(_ACCEPTS, params)
            rows = await cursor.fetchall()
        found = {str(row[0]): (int(row[1]), float(row[2]), bool(row[3])) for row in rows}
        if len(found) != len(accepts):  # never: one row per entry
            raise StorageError("could not accept the message: the database answered for fewer")
        return [found[a.id] for a in accepts]

    async def assign(self, entry_id: str, session: str) -> None:
        async with self.database.connection("name the message's session") as conn:
            await conn.execute(_ASSIGN, {"id": entry_id, "session": session})

    async def earlier_unsettled(self, session: str, entry_id: str) -> list[str]:
        """The session's unsettled entries accepted before `entry_id`; whether `entry_id` is still this owner's
        is learnt in the same round trip and answers the `still_mine(entry_id)` that follows (a turn's check
        before it runs), once and within `MINE_CHECKED_FOR_S`."""
        if self._alone.pop(entry_id, None) == session:  # once: the turn's first check (its owner noted too)
            return []
        params = {"id": entry_id, "session": session, "owner": self.owner}
        hold = self._liveness.hold  # read before the question is sent: the answer is at least as new
        async with self.database.connection("list the session's earlier messages") as conn:
            cursor = await conn.execute(_EARLIER, params)
            rows = await cursor.fetchall()
        if self.owner is not None:
            self._note_mine(entry_id, bool(rows) and rows[0][0] is None, hold)
        answered = self._answered()
        return [str(row[0]) for row in rows if row[0] is not None and row[0] not in answered]

    async def owners_alive(self, entry_ids: Collection[str]) -> bool | None:
        """Whether one of the entries is owned by an instance whose liveness lease is live (this one included);
        False for entries settled meanwhile. None without an owner (tools, tests): entries then have none, and
        nobody takes them over."""
        if self.owner is None:
            return None
        params = {"ids": list(entry_ids), "lease_prefix": INSTANCE_LEASE_PREFIX}
        async with self.database.connection("check the instances that have the earlier messages") as conn:
            cursor = await conn.execute(_OWNERS_ALIVE, params)
            row = await cursor.fetchone()
        return row is not None and bool(row[0])

    def _answered(self) -> list[str]:
        """The entries answered here whose rows are not deleted yet (being, or to be, written)."""
        return [*self._answering, *self._settles.pending]

    def _note_alone(self, entry_id: str, session: str) -> None:
        if len(self._alone) >= MINE_CHECKS_KEPT:  # the oldest: of turns that never ran here
            del self._alone[next(iter(self._alone))]
        self._alone[entry_id] = session

    def _note_mine(self, entry_id: str, mine: bool, hold: int | None) -> None:
        now = time.monotonic()
        if len(self._seen) >= MINE_CHECKS_KEPT:  # those of turns that were requeued, or of an earlier hold
            current = self._liveness.hold
            self._seen = {
                i: s for i, s in self._seen.items() if s.until > now or (s.hold is not None and s.hold == current)
            }
        self._seen[entry_id] = _Seen(mine, hold, now + MINE_CHECKED_FOR_S)

    @property
    def settle_statements(self) -> int:
        """How many settle statements this inbox sent (for tests and benchmarks)."""
        return self._deletes.written

    def settled_with_answer(self, entry_ids: Collection[str]) -> None:
        for entry_id in entry_ids:
            self._seen.pop(entry_id, None)
            self._alone.pop(entry_id, None)
            if len(self._settled_with_answer) >= MINE_CHECKS_KEPT:  # the oldest: a turn that never settled it
                del self._settled_with_answer[next(iter(self._settled_with_answer))]
            self._settled_with_answer[entry_id] = True
        self._depth = max(0, self._depth - len(entry_ids))

    async def settle(self, entry_id: str) -> None:
        """Delete the entry's row (with every other settle asked for while the one before is written: one
        statement), unless the session store deleted it with its answer; a refused delete is retried until the
        database takes it (until then the entry is not listed by `unsettled`)."""
        if self._settled_with_answer.pop(entry_id, False):
            return
        self._seen.pop(entry_id, None)
        self._alone.pop(entry_id, None)
        self._answering.add(entry_id)
        try:
            await self._delete(entry_id)
        except StorageError:
            self._settles.refused(entry_id)
            raise
        finally:
            self._answering.discard(entry_id)

    async def _delete(self, entry_id: str) -> None:
        await self._deletes(entry_id)

    async def _delete_rows(self, entry_ids: list[str]) -> list[None]:
        async with self.database.connection("settle the message") as conn:
            cursor = await conn.execute("DELETE FROM inbox WHERE id = ANY(%(ids)s)", {"ids": entry_ids})
        if cursor.rowcount > 0:
            self._depth = max(0, self._depth - cursor.rowcount)
        return [None] * len(entry_ids)

    async def release(self, entry_id: str) -> None:
        """The entry has no owner from now on (if it was this owner's): the next takeover pass claims it."""
        if self._settled_with_answer.pop(entry_id, False) or self.owner is None:  # settled: nothing to give up
            return
        self._seen.pop(entry_id, None)
        self._alone.pop(entry_id, None)
        async with self.database.connection("give the message up") as conn:
            cursor = await conn.execute(_RELEASE, {"id": entry_id, "owner": self.owner})
        if cursor.rowcount > 0:
            self._depth = max(0, self._depth - 1)

    async def still_mine(self, entry_id: str) -> bool:
        """Whether the entry is still this owner's (False once claimed by another instance, or settled); True
        without an owner (tools, tests: nobody takes entries over), and for one settled with its answer as this
        owner's (`settled_with_answer`)."""
        if self.owner is None or entry_id in self._settled_with_answer:
            return True
        seen = self._seen.get(entry_id)
        if seen is not None and seen.hold is not None and seen.hold == self._liveness.hold:
            return seen.mine  # the same hold: nobody could claim it since (and a claimed one is not given back)
        self._seen.pop(entry_id, None)
        if seen is not None and seen.hold is None and time.monotonic() < seen.until:
            return seen.mine  # no liveness lease: once, soon after
        hold = self._liveness.hold
        async with self.database.connection("check who answers the message") as conn:
            cursor = await conn.execute(_STILL_MINE, {"id": entry_id, "owner": self.owner})
            row = await cursor.fetchone()
        self._note_mine(entry_id, row is not None, hold)
        return row is not None

    async def unsettled(self, source_prefix: str = "") -> list[InboxEntry]:
        """This owner's unsettled entries (every one without an owner) in acceptance order, or those whose
        source starts with `source_prefix`."""
        params = {"prefix": _like_prefix(source_prefix), "owner": self.owner}
        async with self.database.connection("list the unanswered messages") as conn:
            cursor = await conn.execute(_UNSETTLED, params)
            rows = await cursor.fetchall()
        entries = [_entry(row) for row in rows if row[0] not in self._settles.pending]
        if not source_prefix:
            self._depth = len(entries)
        return entries

    async def orphan_sources(self) -> set[str]:
        async with self.database.connection("list the unanswered messages of stopped instances") as conn:
            params = {"owner": self.owner, "lease_prefix": INSTANCE_LEASE_PREFIX}
            cursor = await conn.execute(_ORPHAN_SOURCES, params)
            rows = await cursor.fetchall()
        return {str(row[0]) for row in rows}

    async def claim_orphans(self, sources: Collection[str]) -> list[InboxEntry]:
        if self.owner is None:
            raise ValueError("an inbox without an owner cannot take entries over")
        if not sources:
            return []
        params = {"sources": list(sources), "owner": self.owner, "lease_prefix": INSTANCE_LEASE_PREFIX}
        hold = self._liveness.hold
        async with self.database.connection("take over the messages of a stopped instance") as conn:
            cursor = await conn.execute(_CLAIM, params)
            rows = await cursor.fetchall()
        self._depth += len(rows)
        for row in rows:
            self._note_mine(str(row[0]), True, hold)
        return sorted((_entry(row) for row in rows), key=lambda e: e.seq)

    async def retry_settles(self) -> None:
        await self._settles.retry()

    async def restore(self, entry: InboxEntry) -> bool:
        """Store an entry accepted elsewhere under its own id and time (`agenthub store migrate`); False when it is
        there already. Its seq is new, in the order entries are restored; it has no owner, so the first instance
        that starts takes it over."""
        async with self.database.connection("copy an unanswered message") as conn:
            return await self.restore_on(conn, entry)

    async def restore_on(self, conn: AsyncConnection[TupleRow], entry: InboxEntry) -> bool:
        """`restore` on `conn`, inside the caller's transaction (the migration records the copy in the same one)."""
        params = {"id": entry.id, "source": entry.source, "at": entry.accepted_at, "payload": json_text(entry.payload)}
        cursor = await conn.execute(
            "INSERT INTO inbox (id, source, accepted_at, payload) "
            "VALUES (%(id)s, %(source)s, %(at)s, %(payload)s::json) ON CONFLICT (id) DO NOTHING",
            params,
        )
        if cursor.rowcount > 0:
            self._depth += 1
        return cursor.rowcount > 0

    def depth(self) -> int:
        return self._depth

    async def count(self) -> int:
        async with self.database.connection("count the unanswered messages") as conn:
            cursor = await conn.execute("SELECT count(*) FROM inbox")
            row = await cursor.fetchone()
        return int(row[0]) if row is not None else 0

    async def drop_settled(self) -> None:
        """Nothing to do: a settled entry's row is deleted when it is settled."""
        return None

    async def aclose(self) -> None:
        await self._accepts.aclose()
        await self._deletes.aclose()
        await self._settles.aclose()  # the pool belongs to the `Stores` bundle


def _entry(row: tuple[Any, ...]) -> InboxEntry:
    return InboxEntry(row[0], int(row[1]), float(row[2]), row[3], jsonsafe.loads(row[4]), row[5])


def _like_prefix(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def _accepts_json(accepts: list[_Accept]) -> str:
    """`_ACCEPTS`' rows: a JSON array of objects in the order asked for (`n` from 1), each payload as its text."""
    rows = [
        {"n": n, "id": a.id, "source": a.source, "payload": a.payload, "session": a.session}
        for n, a in enumerate(accepts, 1)
    ]
    return json.dumps(rows, ensure_ascii=False)
