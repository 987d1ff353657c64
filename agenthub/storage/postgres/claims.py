"""`Claims`: the session claims an instance sends at about the same time, in one statement (`Batches`' group
commit: the first goes at once, those that come while it is out go together in the next), each one
`agenthub_session_claim` (migrations 19, 27) in lease-name order."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import structlog

from agenthub.errors import StorageError
from agenthub.session_keys import SessionKey
from agenthub.storage.postgres.batches import Batches
from agenthub.storage.postgres.database import Database
from agenthub.storage.postgres.let_go import LetGo, LetGos

log = structlog.get_logger(__name__)

_CLAIM_MANY = """
SELECT r.ord, c.o_token, c.o_fence, c.o_born, c.o_next, c.o_meta, c.o_seq, c.o_record
FROM json_to_recordset(%(rows)s::json) AS r(
    ord integer, name text, holder text, ttl double precision, agent text, channel text, chat_id text, born bigint,
    since bigint
)
CROSS JOIN LATERAL agenthub_session_claim(r.name, r.holder, r.ttl, r.agent, r.channel, r.chat_id, r.born, r.since) c
ORDER BY r.ord, c.o_seq NULLS FIRST
"""
"""`agenthub_session_claim` for each row, in the rows' order, in one transaction (the rows one JSON parameter, as
the let-gos' and the appends': text arrays cost psycopg a quoting pass in Python per element): each claim takes its
lease row, then its session's lock (the fence), session by session in lease-name order: the order of the let-gos
(`let_go.py`), the appends and the renewals, so none of them waits for another in a circle. A claim's rows come out
as one claim alone brings them: its head (no seq) first, then its records by seq. A claim with a budget reservation
riding in it (migration 26) is never in a batch: it takes budget locks after its session's lock, and a later
session's lock in the same transaction would come after them."""

_CLAIM_ONE = """
SELECT 1, c.o_token, c.o_fence, c.o_born, c.o_next, c.o_meta, c.o_seq, c.o_record
FROM agenthub_session_claim(%s, %s, %s, %s, %s, %s, %s, %s) c
ORDER BY c.o_seq NULLS FIRST
"""
"""A batch of one claim (the common case without a burst): its rows as `_CLAIM_MANY` gives them, without the arrays
(each element of which psycopg quotes in Python) or the join."""

Row = tuple[Any, ...]


@dataclass(eq=False)
class ClaimAsk:
    name: str
    holder: str
    ttl_s: float
    key: SessionKey
    born: int | None
    since: int
    rows: list[Row] | None = None
    """The claim's rows, once its batch is answered (None: it failed, or was never sent)."""
    answered: asyncio.Event = field(default_factory=asyncio.Event)


class Claims:
    """The claims of an instance's sessions (without a ride), group-committed by `Batches`. Each caller gets its
    own claim's rows; a failure is each caller's. A caller cancelled stops waiting: the lease its claim was granted
    (nobody holds it here) is let go, and a later claim of that session waits for that let-go first."""

    def __init__(self, database: Database, let_gos: LetGos) -> None:
        self.database = database
        self._let_gos = let_gos
        self._batches: Batches[ClaimAsk, list[Row]] = Batches(self._send, "session-claims")
        self._giving_back: dict[str, asyncio.Task[None]] = {}
        """Per lease name, the give-back of a cancelled claim's grant (waiting for its batch's answer first)."""
        self._abandoned: set[ClaimAsk] = set()
        self.statements = 0
        """Statements sent (tests: claims that came together went together)."""

    async def claim(self, ask: ClaimAsk) -> list[Row]:
        """The rows of `ask`'s claim (as `agenthub_session_claim` returns them)."""
        await self.given_back(ask.name)
        try:
            return await self._batches(ask)
        except asyncio.CancelledError:
            self._give_back(ask)  # whether its batch answered already or answers later
            raise

    async def given_back(self, name: str) -> None:
        """Wait for the let-go of a grant of lease `name` given back here: a claim of it sent before that let-go
        would be renewed with the same token, then expired by it."""
        giving_back = self._giving_back.get(name)
        if giving_back is not None:
            await asyncio.shield(giving_back)

    async def close(self) -> None:
        """Wait for the claims asked for and the grants given back (the store closes its pool after this)."""
        await self._batches.aclose()
        for ask in self._abandoned:  # never sent (the loop is closing): nothing was granted
            ask.answered.set()
        while self._giving_back:
            await asyncio.wait(list(self._giving_back.values()))

    async def _send(self, asks: list[ClaimAsk]) -> list[list[Row]]:
        order = sorted(range(len(asks)), key=lambda i: asks[i].name)  # rows locked in one order by everyone
        ordered = [asks[i] for i in order]
        params: tuple[Any, ...] | dict[str, str]
        query, params = (_CLAIM_ONE, self._one(ordered[0])) if len(ordered) == 1 else (_CLAIM_MANY, self._many(ordered))
        self.statements += 1
        try:
            async with self.database.connection("claim the session") as conn:
                cursor = await conn.execute(query, params)
                rows = await cursor.fetchall()
        finally:  # answered, or failed: a give-back waiting for it goes on
            for ask in asks:
                ask.answered.set()
        by_position: list[list[Row]] = [[] for _ in ordered]
        for row in rows:
            by_position[int(row[0]) - 1].append(tuple(row[1:]))
        results: list[list[Row]] = [[] for _ in asks]
        for position, index in enumerate(order):
            asks[index].rows = results[index] = by_position[position]
        return results

    @staticmethod
    def _one(ask: ClaimAsk) -> tuple[Any, ...]:
        return (ask.name, ask.holder, ask.ttl_s, ask.key.agent, ask.key.channel, ask.key.chat_id, ask.born, ask.since)

    @staticmethod
    def _many(ordered: list[ClaimAsk]) -> dict[str, str]:
        rows = [
            {
                "ord": n,
                "name": a.name,
                "holder": a.holder,
                "ttl": a.ttl_s,
                "agent": a.key.agent,
                "channel": a.key.channel,
                "chat_id": a.key.chat_id,
                "born": a.born,
                "since": a.since,
            }
            for n, a in enumerate(ordered, start=1)
        ]
        return {"rows": json.dumps(rows, ensure_ascii=False)}

    def _give_back(self, ask: ClaimAsk) -> None:
        """Let go the lease granted to the claim of a caller that stopped waiting, once its batch answers (after
        any earlier give-back of the same lease)."""
        before = self._giving_back.get(ask.name)
        self._abandoned.add(ask)
        task = asyncio.create_task(self._give_back_after(ask, before), name=f"claim-given-back:{ask.name}")
        self._giving_back[ask.name] = task
        task.add_done_callback(lambda done: self._given_back(ask, done))

    def _given_back(self, ask: ClaimAsk, task: asyncio.Task[None]) -> None:
        self._abandoned.discard(ask)
        if self._giving_back.get(ask.name) is task:
            del self._giving_back[ask.name]

    async def _give_back_after(self, ask: ClaimAsk, before: asyncio.Task[None] | None) -> None:
        if before is not None:
            await asyncio.wait([before])
        await ask.answered.wait()
        rows = ask.rows
        if not rows or rows[0][0] is None:  # refused, failed or never sent: nothing to give back
            return
        await self._let_go(LetGo(ask.name, int(rows[0][0]), ask.key.agent, ask.key.channel, ask.key.chat_id, None))

    async def _let_go(self, item: LetGo) -> None:
        try:
            await self._let_gos.let_go(item)
        except StorageError as e:  # the lease then ends at its expiry
            log.warning("session_claim_give_back_failed", lease=item.name, error=str(e))
