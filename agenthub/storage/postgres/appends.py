"""The history's appends in batches (`PostgresSessionStore`'s `Batches`): one statement for every append asked for
while the one before was written, with the let-gos and the inbox settles that ride on them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

from agenthub.errors import StorageError
from agenthub.session_keys import SessionKey
from agenthub.storage.postgres.database import Database
from agenthub.storage.postgres.memory_clock import VERSION

APPENDS = f"""
WITH appended AS MATERIALIZED (
    SELECT b.n, b.agent, b.channel, b.chat_id, b.token, b.meta, b.settle, agenthub_session_append_let_go(
        b.agent, b.channel, b.chat_id, b.token,
        ARRAY(SELECT r.text FROM json_array_elements_text(b.records) WITH ORDINALITY AS r(text, i) ORDER BY r.i),
        b.name
    ) AS version
    FROM json_to_recordset(%(appends)s::json) AS b(
        n integer, agent text, channel text, chat_id text, token bigint, meta text, records json, name text, settle json
    )
    ORDER BY b.n
), answered AS (
    SELECT i.id FROM inbox i
    WHERE i.id = ANY(ARRAY(
        SELECT s.id FROM appended a CROSS JOIN LATERAL json_array_elements_text(a.settle) AS s(id)
        WHERE a.version IS NOT NULL
    )) AND i.owner IS NOT DISTINCT FROM %(owner)s
    ORDER BY i.id
    FOR UPDATE
), settled AS (
    DELETE FROM inbox WHERE id = ANY(ARRAY(SELECT id FROM answered)) RETURNING id
)
SELECT n, version[1:2], {VERSION}, CASE WHEN version IS NOT NULL AND meta IS NOT NULL THEN agenthub_session_write_meta(
    agent, channel, chat_id, token, meta, true
) END, coalesce(version[3] = 1, false), ARRAY(
    SELECT s.id FROM settled s WHERE s.id IN (SELECT json_array_elements_text(settle))
) FROM appended ORDER BY n
"""
"""The appends of a batch (`Batches`: those asked for while the one before was written), in one statement, so one
transaction and one commit: each session's in the order of the sessions' keys, code point by code point (every
batch, and every batch of let-gos, takes the sessions' locks in that one order), an append under a lease's token or
none (`agenthub_session_append_let_go`, migration 29, around migration 19's `agenthub_session_append_at`) bringing
back the history's version after it, {born, next_seq}, or NULL when a newer lease fenced the session; once it
landed, the meta written behind under the same token (a busy session's meta reaches the database with its next
append instead of waiting for the lease's release, at no round trip of its own); whether the session's lease was
released with it (an append that carries its lease's `name`: a turn's answer whose session is let go at once,
`append_letting_go`); and the memory version (migration 25), which the turn's read of its memory files that follows
needs (`MemoryClock`). And the inbox entries an append answers by being stored (`append_settling`: HTTP's without an
idempotency key) deleted with it, those the instance still owns (`owner`; one another instance claimed meanwhile is
that instance's), landed appends only, the rows looked up by the id index (`= ANY(ARRAY(…))`: a join would be
planned as a scan of the whole inbox) and locked in id order: so no settle statement follows the answer, and no
moment exists where the answer is stored and its entry still waits to be settled. The appends go as one JSON
parameter (`appends_json`): text arrays cost psycopg a quoting pass in Python per element, the most of a batch's CPU
for records (JSON, full of quotes); the C JSON encoder does it in a fraction."""


@dataclass(frozen=True)
class Append:
    key: SessionKey
    token: int | None
    texts: list[str]
    meta: str | None
    """The meta written behind, as JSON text, that goes with the records."""
    name: str | None = None
    """The session's lease, released with the records (`append_letting_go`)."""
    settles: tuple[str, ...] = ()
    """The inbox entries the records answer, settled with them (`append_settling`)."""


class Appended(NamedTuple):
    """What `APPENDS` answered for one append."""

    version: Any
    """The history's version after it, [born, next_seq]; None when a newer lease fenced the session."""
    memory_version: int
    released: bool
    """Whether the session's lease was released with it."""
    settled: tuple[str, ...]
    """The inbox entries deleted with it."""


def appends_json(batch: list[Append]) -> str:
    """`APPENDS`' rows: a JSON array of objects in the batch's order (`n` from 1), each with its record texts."""
    rows = [
        {
            "n": n,
            "agent": a.key.agent,
            "channel": a.key.channel,
            "chat_id": a.key.chat_id,
            "token": a.token,
            "meta": a.meta,
            "records": a.texts,
            "name": a.name,
            "settle": list(a.settles) if a.settles else None,
        }
        for n, a in enumerate(batch, 1)
    ]
    return json.dumps(rows, ensure_ascii=False)


async def write_appends(database: Database, appends: list[Append], owner: str | None) -> list[Appended]:
    """`APPENDS` of `appends` (inbox entries settled only while `owner` owns them), each one's `Appended`."""
    # the let-gos' order (lease names, `session:<key>`): not the file stems, where ':' is '_' and sorts elsewhere
    order = sorted(range(len(appends)), key=lambda i: str(appends[i].key))
    batch = [appends[i] for i in order]
    async with database.connection("append to the session's history") as conn:
        cursor = await conn.execute(APPENDS, {"appends": appends_json(batch), "owner": owner})
        rows = await cursor.fetchall()
    if len(rows) != len(appends):  # never: one row per append
        raise StorageError("could not append to the session's history: the database answered for fewer")
    results = [Appended(None, 0, False, ())] * len(appends)
    for row in rows:
        results[order[int(row[0]) - 1]] = Appended(row[1], int(row[2]), bool(row[4]), tuple(row[5]))
    return results
