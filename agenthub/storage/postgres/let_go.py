"""`LetGos`: the sessions an instance lets go at about the same time, released in one statement (`Batches`' group
commit: the first goes at once, those that come while it is out go together in the next)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from agenthub.storage.postgres.batches import Batches
from agenthub.storage.postgres.database import Database

_LET_GO_MANY = """
SELECT r.ord, agenthub_session_let_go(r.name, r.token, r.agent, r.channel, r.chat_id, r.meta)
FROM json_to_recordset(%(rows)s::json)
     AS r(ord integer, name text, token bigint, agent text, channel text, chat_id text, meta text)
"""
"""`agenthub_session_let_go` (migration 19) for each row, in the rows' order, in one transaction: every lease row,
then that session's lock, lease by lease in name order (`json_to_recordset` gives the array's objects in order).
The rows go as one JSON parameter, encoded by the C JSON encoder: six text arrays cost psycopg a quoting pass in
Python per element, which a let-go on every moved turn paid. A claim takes one lease row, then its
session's lock; a renewal takes lease rows in name order: the same order everywhere, so no two of them wait for
each other."""


@dataclass(frozen=True)
class LetGo:
    name: str
    token: int
    agent: str
    channel: str
    chat_id: str
    meta: str | None
    """The meta written behind under the lease (JSON text), None: none."""


class LetGos:
    """The let-gos of an instance's sessions, group-committed by `Batches`: one statement in flight at a time, each
    carrying every let-go asked for meanwhile, its rows in name order. Each caller gets its own answer (the meta
    written, or refused by a newer fence); a failure is each caller's; a caller cancelled stops waiting, and its
    session is let go all the same."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self._batches: Batches[LetGo, bool] = Batches(self._send, "session-let-go")
        self.statements = 0
        """Statements sent (tests: let-gos that came together went together)."""

    async def let_go(self, item: LetGo) -> bool:
        """`item` released (and its meta written); whether the meta was written (True without one)."""
        return await self._batches(item)

    async def close(self) -> None:
        """Wait for the let-gos asked for (the store closes its pool after this)."""
        await self._batches.aclose()

    async def _send(self, items: list[LetGo]) -> list[bool]:
        order = sorted(range(len(items)), key=lambda i: items[i].name)  # rows locked in one order by everyone
        ordered = [items[i] for i in order]
        self.statements += 1
        async with self.database.connection("let the sessions go") as conn:
            cursor = await conn.execute(_LET_GO_MANY, {"rows": _rows_json(ordered)})
            rows = await cursor.fetchall()
        by_position = {int(row[0]) - 1: bool(row[1]) for row in rows}
        written = [True] * len(items)
        for position, index in enumerate(order):
            written[index] = by_position.get(position, False)
        return written


def _rows_json(items: list[LetGo]) -> str:
    """The let-gos as `_LET_GO_MANY`'s rows: a JSON array of objects, `ord` counting from 1 in the list's order."""
    return json.dumps(
        [
            {
                "ord": n,
                "name": i.name,
                "token": i.token,
                "agent": i.agent,
                "channel": i.channel,
                "chat_id": i.chat_id,
                "meta": i.meta,
            }
            for n, i in enumerate(items, 1)
        ],
        ensure_ascii=False,
    )
