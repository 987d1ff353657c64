"""`PostgresJobs`: the scheduled jobs of every instance in the table `jobs`. A fire is recorded by one statement
guarded by the job's stored due time, so when several instances (or a leader and its successor) try to record the
same fire, exactly one succeeds."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from agenthub.storage.jobs import FireRecord, JobDocument
from agenthub.storage.postgres.database import Database

_PUT = """
INSERT INTO jobs (agent, id, next_due, doc) VALUES (%(agent)s, %(id)s, %(next_due)s, %(doc)s::json)
ON CONFLICT (agent, id) DO UPDATE SET next_due = EXCLUDED.next_due, doc = EXCLUDED.doc, changed_at = now()
"""
_PUT_IF = """
UPDATE jobs SET next_due = %(next_due)s, doc = %(doc)s::json, changed_at = now()
WHERE agent = %(agent)s AND id = %(id)s AND next_due IS NOT DISTINCT FROM %(expected)s
"""
_ADVANCE = """
UPDATE jobs SET next_due = %(next_due)s, doc = %(doc)s::json, changed_at = now()
WHERE agent = %(agent)s AND id = %(id)s AND next_due = %(due)s
"""
_FINISH = "DELETE FROM jobs WHERE agent = %(agent)s AND id = %(id)s AND next_due = %(due)s"


class PostgresJobs:
    """`JobDocuments` shared by every instance; `doc` is `json` (kept as written, read back as its text)."""

    shared = True

    def __init__(self, database: Database) -> None:
        self.database = database

    async def load_all(self, agent: str | None = None) -> list[JobDocument]:
        async with self.database.connection("read the scheduled jobs") as conn:
            if agent is None:
                cursor = await conn.execute("SELECT agent, id, next_due, doc::text FROM jobs ORDER BY agent, id")
            else:
                cursor = await conn.execute(
                    "SELECT agent, id, next_due, doc::text FROM jobs WHERE agent = %s ORDER BY id", (agent,)
                )
            rows = await cursor.fetchall()
        return [JobDocument(row[0], row[1], row[2], row[3]) for row in rows]

    async def put(self, document: JobDocument) -> None:
        async with self.database.connection("store a scheduled job") as conn:
            await conn.execute(_PUT, _params(document))

    async def put_if(self, document: JobDocument, expected_due: float | None) -> bool:
        async with self.database.connection("change a scheduled job") as conn:
            cursor = await conn.execute(_PUT_IF, {**_params(document), "expected": expected_due})
        return cursor.rowcount == 1

    async def remove(self, agent: str, job_ids: Collection[str]) -> None:
        if not job_ids:
            return
        async with self.database.connection("remove scheduled jobs") as conn:
            await conn.execute("DELETE FROM jobs WHERE agent = %s AND id = ANY(%s)", (agent, list(job_ids)))

    async def record_fires(self, fires: Sequence[FireRecord]) -> list[bool]:
        """Each fire one guarded statement, all in one transaction (one round trip per fire, one commit)."""
        if not fires:
            return []
        recorded = []
        async with self.database.connection("record a job's run") as conn, conn.transaction():
            for fire in fires:
                guard = {"agent": fire.agent, "id": fire.job_id, "due": fire.due}
                if fire.after is None:
                    cursor = await conn.execute(_FINISH, guard)
                else:
                    cursor = await conn.execute(_ADVANCE, {**_params(fire.after), **guard})
                recorded.append(cursor.rowcount == 1)
        return recorded


def _params(document: JobDocument) -> dict[str, object]:
    return {"agent": document.agent, "id": document.job_id, "next_due": document.next_due, "doc": document.text}
