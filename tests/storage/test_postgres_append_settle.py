"""Inbox entries settled in the statement that stores their answer (`PostgresSessionStore.append_settling`): the
entry's row deleted with the records (no settle statement follows, `still_mine` answers without one), only while
this instance owns it, only when the append landed, each append of a batch with its own entries, and an entry a
takeover holds waited for and then left to its new owner, and the entries found by the index in a large inbox."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import psycopg

from agenthub.session_keys import SessionKey, session_key
from agenthub.storage.inbox import InboxEntry
from agenthub.storage.lease import Lease
from agenthub.storage.meta import SessionMeta
from agenthub.storage.postgres import PostgresInbox, PostgresSessionStore
from agenthub.storage.postgres.appends import APPENDS
from agenthub.storage.postgres.database import Database
from agenthub.storage.store import FencedWriteError
from tests.support.leases import claimed, session_lease

TTL_S = 30.0


def key(n: int) -> SessionKey:
    return session_key("default", "http", f"settle{n}")


def msg(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "content": text, "timestamp": 1}


async def claim(store: PostgresSessionStore, k: SessionKey) -> Lease:
    lease = await claimed(store, k, "a", TTL_S)
    assert lease is not None
    return lease


async def inbox_rows(database: Database) -> dict[str, str | None]:
    async with database.connection("read the inbox") as conn:
        cursor = await conn.execute("SELECT id, owner FROM inbox")
        return {str(row[0]): row[1] for row in await cursor.fetchall()}


def wired(store: PostgresSessionStore, owner: str) -> PostgresInbox:
    inbox = PostgresInbox(store.database, owner=owner)
    store.settle_answers_of(inbox)
    return inbox


async def claimed_entry(store: PostgresSessionStore, n: int) -> tuple[PostgresInbox, SessionKey, Lease, InboxEntry]:
    """Store `store` settling for instance "a", the session `key(n)` claimed by it, and an entry of that session."""
    inbox = wired(store, "a")
    k = key(n)
    lease = await claim(store, k)
    return inbox, k, lease, await inbox.accept("http", {"text": "q"}, session=str(k))


async def test_the_answer_s_append_deletes_its_entry_and_the_settle_after_it_sends_nothing(
    pg_two: list[PostgresSessionStore],
) -> None:
    a = pg_two[0]
    inbox, k, _, entry = await claimed_entry(a, 0)
    await a.append(k, [msg("user", "question")])
    trips = a.database.latency.count
    assert await a.append_settling(k, [msg("assistant", "answer")], [entry.id]) is False  # no lease given
    assert a.database.latency.count == trips + 1  # the answer and the settle: one statement
    assert await inbox_rows(a.database) == {}
    trips = a.database.latency.count
    assert await inbox.still_mine(entry.id) is True  # settled as this instance's: its answer is delivered
    await inbox.settle(entry.id)
    assert a.database.latency.count == trips  # nothing left to settle
    assert [r["content"] for r in await a.load(k)] == ["question", "answer"]


async def test_with_a_lease_the_answer_settles_and_lets_go_in_one_statement(pg_two: list[PostgresSessionStore]) -> None:
    a, b = pg_two
    _, k, lease, entry = await claimed_entry(a, 1)
    meta = SessionMeta(k.chat_id, title="settled", created_at=1, updated_at=2)
    trips = a.database.latency.count
    released = await a.append_settling(k, [msg("user", "q"), msg("assistant", "a")], [entry.id], meta=meta, lease=lease)
    assert released is True and a.database.latency.count == trips + 1
    assert await inbox_rows(a.database) == {}
    regained = await claimed(b, k, "b", TTL_S)  # let go with it: claimed at once
    assert regained is not None and regained.token > lease.token


async def test_an_entry_another_instance_owns_is_left_to_it(
    pg_two: list[PostgresSessionStore],
) -> None:
    a = pg_two[0]
    inbox, k, _, entry = await claimed_entry(a, 2)
    async with a.database.connection("a survivor claims it") as conn:
        await conn.execute("UPDATE inbox SET owner = 'b' WHERE id = %s", [entry.id])
    await a.append_settling(k, [msg("user", "q"), msg("assistant", "a")], [entry.id])
    assert await inbox_rows(a.database) == {entry.id: "b"}  # b answers it (its turn finds the answer stored)
    await inbox.still_mine(entry.id)  # (without a liveness lease, the accept's own answer serves this one, once)
    assert await inbox.still_mine(entry.id) is False  # not counted as settled here: asked, and it is b's


async def test_a_fenced_append_settles_nothing(pg_two: list[PostgresSessionStore]) -> None:
    a, b = pg_two
    inbox, k, _, entry = await claimed_entry(a, 3)
    async with b.database.connection("a's lease lapses") as conn:
        await conn.execute("UPDATE leases SET expires_at = now() WHERE name = %s", [session_lease(k)])
    assert await claimed(b, k, "b", TTL_S) is not None  # b fenced the session
    try:
        await a.append_settling(k, [msg("user", "q"), msg("assistant", "a")], [entry.id])
    except FencedWriteError:
        pass
    else:
        raise AssertionError("a write under the older lease landed")
    assert await inbox_rows(a.database) == {entry.id: "a"}
    trips = a.database.latency.count
    await inbox.settle(entry.id)  # whatever becomes of it, it is not counted as settled
    assert a.database.latency.count == trips + 1


async def test_appends_at_once_each_settle_their_own_entries_in_shared_batches(
    pg_two: list[PostgresSessionStore],
) -> None:
    a = pg_two[0]
    inbox = wired(a, "a")
    keys = [key(10 + n) for n in range(24)]
    for k in keys:
        await claim(a, k)
    entries = {k: [await inbox.accept("http", {"n": n}, session=str(k)) for n in range(2)] for k in keys}
    bystander = await inbox.accept("http", {"text": "not answered"}, session=str(keys[0]))
    trips = a.database.latency.count
    await asyncio.gather(
        *(a.append_settling(k, [msg("user", "q"), msg("assistant", "a")], [e.id for e in entries[k]]) for k in keys)
    )
    assert a.database.latency.count - trips < len(keys)  # they went together
    assert await inbox_rows(a.database) == {bystander.id: "a"}
    for k in keys:
        assert all(await asyncio.gather(*(inbox.still_mine(e.id) for e in entries[k])))
    trips = a.database.latency.count
    await asyncio.gather(*(inbox.settle(es[0].id) for es in entries.values()))
    await asyncio.gather(*(inbox.release(es[1].id) for es in entries.values()))  # a turn that lost its session
    assert a.database.latency.count == trips  # settled already: nothing to settle, nothing to give up


async def test_an_entry_a_takeover_holds_is_waited_for_then_left_to_its_new_owner(
    pg_two: list[PostgresSessionStore], postgres_dsn: str
) -> None:
    a = pg_two[0]
    _, k, _, entry = await claimed_entry(a, 4)
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as survivor:  # its claim's transaction, open
        await survivor.execute("UPDATE inbox SET owner = 'b' WHERE id = %s", [entry.id])
        append = asyncio.create_task(a.append_settling(k, [msg("user", "q"), msg("assistant", "a")], [entry.id]))
        await asyncio.sleep(0.3)
        assert not append.done()  # the row is locked: the append waits for the claim's outcome
        await survivor.commit()
        await asyncio.wait_for(append, 10)
    assert await inbox_rows(a.database) == {entry.id: "b"}  # seen with its new owner: not deleted
    assert [r["content"] for r in await a.load(k)] == ["q", "a"]


async def test_a_settling_append_finds_its_entries_by_the_index_in_a_large_inbox(
    pg_two: list[PostgresSessionStore],
) -> None:
    a = pg_two[0]
    async with a.database.connection("fill the inbox") as conn:  # a backlog: entries no channel resumes, an outage
        await conn.execute(
            "INSERT INTO inbox (id, source, accepted_at, payload, owner)"
            " SELECT 'e' || g, 'http', 0, '{}', 'a' FROM generate_series(1, 20000) g"
        )
        await conn.execute("ANALYZE inbox")
        row = {"n": 1, "agent": "default", "channel": "http", "chat_id": "big", "token": None, "meta": None}
        rows = [{**row, "records": [json.dumps(msg("assistant", "a"))], "name": None, "settle": ["e7"]}]
        cursor = await conn.execute("EXPLAIN " + APPENDS, {"appends": json.dumps(rows), "owner": "a"})
        plan = "\n".join(str(line[0]) for line in await cursor.fetchall())
    assert "inbox_id_key" in plan and "Seq Scan on inbox" not in plan, plan
