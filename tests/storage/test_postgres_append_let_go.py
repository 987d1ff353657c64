"""A session let go in the statement that writes its turn's answer (migration 29): released the moment the append
returns (no let-go statement), the meta with it, a fenced one refused alone in a batch of plain and riding appends,
a lease row another transaction holds never waited for (the let-go is left to the usual statement), and an
instance still on the old functions beside a new one."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import psycopg

from agenthub.session_keys import SessionKey, session_key
from agenthub.storage.lease import Lease
from agenthub.storage.meta import SessionMeta
from agenthub.storage.postgres import PostgresLeases, PostgresSessionStore
from agenthub.storage.postgres.let_go import _LET_GO_MANY
from agenthub.storage.store import FencedWriteError
from tests.support.leases import claimed, session_lease

TTL_S = 30.0


def key(n: int) -> SessionKey:
    return session_key("default", "http", f"ride{n}")


def msg(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text, "timestamp": 1}


async def claim(store: PostgresSessionStore, k: SessionKey, holder: str) -> Lease | None:
    return await claimed(store, k, holder, TTL_S)


async def lease_free(store: PostgresSessionStore, k: SessionKey) -> bool:
    async with store.database.connection("read the lease") as conn:
        cursor = await conn.execute("SELECT expires_at <= now() FROM leases WHERE name = %s", [session_lease(k)])
        row = await cursor.fetchone()
    assert row is not None
    return bool(row[0])


async def test_an_answer_appended_with_its_let_go_frees_the_lease_in_that_one_statement(
    pg_two: list[PostgresSessionStore],
) -> None:
    a, b = pg_two
    k = key(0)
    lease = await claim(a, k, "a")
    assert lease is not None
    await a.append(k, [msg("question")])
    meta = SessionMeta(k.chat_id, title="riding", created_at=1, updated_at=2)
    trips, let_gos = a.database.latency.count, a.let_gos.statements
    assert await a.append_letting_go(k, [msg("answer")], meta, lease) is True
    assert a.database.latency.count - trips == 1 and a.let_gos.statements == let_gos
    assert await lease_free(a, k)
    regained = await claim(b, k, "b")  # at once, nobody asked
    assert regained is not None and regained.token > lease.token
    assert [r["content"] for r in await b.load(k)] == ["question", "answer"]
    stored = await b.read_meta(k)
    assert stored is not None and stored.title == "riding"


async def test_appends_with_and_without_let_go_and_a_fenced_one_share_a_batch_and_each_gets_its_own_answer(
    pg_two: list[PostgresSessionStore],
) -> None:
    a, b = pg_two
    riding, plain, fenced = [key(n) for n in range(1, 5)], [key(n) for n in range(5, 8)], key(8)
    leases = {k: lease for k in [*riding, *plain, fenced] if (lease := await claim(a, k, "a")) is not None}
    assert len(leases) == len(riding) + len(plain) + 1
    async with b.database.connection("take the session over") as conn:  # a's lease of it lapsed, b claimed it
        await conn.execute("UPDATE leases SET expires_at = now() WHERE name = %s", [session_lease(fenced)])
    taken = await claim(b, fenced, "b")
    assert taken is not None
    trips = a.database.latency.count
    meta = SessionMeta("m", created_at=1, updated_at=1)
    results = await asyncio.gather(
        *(a.append_letting_go(k, [msg(f"{k.chat_id} answer")], meta, leases[k]) for k in riding),
        *(a.append(k, [msg(f"{k.chat_id} answer")]) for k in plain),
        a.append_letting_go(fenced, [msg("late")], meta, leases[fenced]),
        return_exceptions=True,
    )
    assert a.database.latency.count - trips <= 2  # the first alone, the others together behind it
    assert results[: len(riding)] == [True] * len(riding)
    assert results[len(riding) : -1] == [None] * len(plain)
    assert isinstance(results[-1], FencedWriteError)
    for k in [*riding, *plain]:
        assert [r["content"] for r in await b.load(k)] == [f"{k.chat_id} answer"]
    assert await b.load(fenced) == []
    assert [await lease_free(a, k) for k in riding] == [True] * len(riding)
    assert [await lease_free(a, k) for k in plain] == [False] * len(plain)  # still a's
    assert not await lease_free(a, fenced)  # b's, untouched by a's late release
    assert [await claim(b, k, "b") is not None for k in riding] == [True] * len(riding)


async def test_a_lease_row_held_by_another_transaction_does_not_hold_the_answer_up(
    pg_two: list[PostgresSessionStore], postgres_dsn: str
) -> None:
    """The release is skipped when the lease's row is locked (another instance's claim, a renewal in flight): the
    answer lands at once and says it did not let go; the usual let-go does it once the row is free."""
    a, b = pg_two
    k = key(9)
    lease = await claim(a, k, "a")
    assert lease is not None
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as lock:
        await lock.execute("SELECT 1 FROM leases WHERE name = %s FOR UPDATE", [session_lease(k)])
        async with asyncio.timeout(5):
            landed = await a.append_letting_go(k, [msg("answer")], SessionMeta(k.chat_id), lease)
        assert landed is False
        await lock.rollback()
    assert not await lease_free(a, k)
    assert await claim(b, k, "b") is None
    await a.let_go(k, lease)
    assert await lease_free(a, k)
    assert [r["content"] for r in await b.load(k)] == ["answer"]


_OLD_APPENDS = """
SELECT b.n, agenthub_session_append_at(b.agent, b.channel, b.chat_id, b.token, ARRAY(
    SELECT r.text FROM json_array_elements_text(b.records) WITH ORDINALITY AS r(text, i) ORDER BY r.i))
FROM json_to_recordset(%(appends)s::json)
     AS b(n integer, agent text, channel text, chat_id text, token bigint, records json)
ORDER BY b.n
"""
"""What an instance from before migration 29 sends for its appends (migration 19's function)."""


async def _old_append(store: PostgresSessionStore, k: SessionKey, token: int, text: str) -> bool:
    row = {"n": 1, "agent": k.agent, "channel": k.channel, "chat_id": k.chat_id, "token": token, "records": [text]}
    async with store.database.connection("old append") as conn:
        cursor = await conn.execute(_OLD_APPENDS, {"appends": json.dumps([row])})
        rows = await cursor.fetchall()
    return rows[0][1] is not None


async def _old_let_go(store: PostgresSessionStore, k: SessionKey, lease: Lease) -> None:
    row = {"ord": 1, "name": lease.name, "token": lease.token, "agent": k.agent, "channel": k.channel}
    row |= {"chat_id": k.chat_id, "meta": None}
    async with store.database.connection("old let-go") as conn:
        await conn.execute(_LET_GO_MANY, {"rows": json.dumps([row])})


async def test_an_old_instance_and_a_new_one_hand_sessions_to_each_other_on_one_database(
    pg_two: list[PostgresSessionStore],
) -> None:
    """`old` writes with migration 19's append and let-go functions, which migration 29 leaves as they were; the
    new instance's riding let-go frees the session for it, its own let-go for the new one, and a late append under
    an old token is refused by either."""
    old, new = pg_two
    k = key(10)
    for turn in range(3):
        held = await claim(old, k, "old")
        assert held is not None
        assert await _old_append(
            old, k, held.token, json.dumps({"role": "user", "content": f"old {turn}", "timestamp": 1})
        )
        await _old_let_go(old, k, held)
        mine = await claim(new, k, "new")
        assert mine is not None and mine.token > held.token
        assert await new.append_letting_go(k, [msg(f"new {turn}")], SessionMeta(k.chat_id), mine) is True
        assert not await _old_append(old, k, held.token, '{"role": "user", "content": "late", "timestamp": 1}')
    contents = [r["content"] for r in await new.load(k)]
    assert contents == ["old 0", "new 0", "old 1", "new 1", "old 2", "new 2"]


async def test_riding_appends_claims_renewals_and_let_gos_of_two_instances_at_once_never_deadlock(
    pg_two: list[PostgresSessionStore],
) -> None:
    """Each instance claims random sessions at once, renews what it holds, and lets half of them go with their
    answer and the other half by let-go, round after round, against the other doing the same: a deadlock would
    surface as a StorageError (PostgreSQL aborts one of the two). Every answer lands, every lease ends free."""
    keys = [key(100 + n) for n in range(16)]
    rode = 0

    async def instance(store: PostgresSessionStore, holder: str, seed: int) -> None:
        nonlocal rode
        rng, renewer = random.Random(seed), PostgresLeases(store.database)
        for _ in range(25):
            wanted = rng.sample(keys, 6)
            granted = await asyncio.gather(*(claim(store, k, holder) for k in wanted))
            held = [(k, lease) for k, lease in zip(wanted, granted, strict=True) if lease is not None]
            riding, plain = held[::2], held[1::2]
            meta = SessionMeta("m", title=holder)
            results = await asyncio.gather(
                renewer.renew_many([lease for _, lease in held], TTL_S),
                *(store.append_letting_go(k, [msg(holder)], meta, lease) for k, lease in riding),
                *(store.append(k, [msg(holder)]) for k, _ in plain),
            )
            released = results[1 : 1 + len(riding)]
            rode += sum(1 for r in released if r)
            let_go = [(k, lease) for (k, lease), r in zip(riding, released, strict=True) if not r] + plain
            await asyncio.gather(*(store.let_go(k, lease) for k, lease in let_go))

    async with asyncio.timeout(120):
        await asyncio.gather(instance(pg_two[0], "a", 1), instance(pg_two[1], "b", 2))
    assert rode > 0
    async with pg_two[0].database.connection("count") as conn:
        cursor = await conn.execute("SELECT count(*) FROM leases WHERE expires_at > now()")
        assert await cursor.fetchone() == (0,)
