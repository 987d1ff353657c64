"""Session claims on PostgreSQL: the claims an instance asks for together go in one statement, each with its own
grant, fence and records; a session held elsewhere is refused alone; two instances claiming the same sessions at
once never both hold one, also when one's claims carry budget reservations (alone, with budget locks); a claim
whose caller was cancelled gives its grant back, also when the stores close right after (shutdown cancels the turns)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg
from psycopg.rows import TupleRow

from agenthub.session_keys import SessionKey, session_key
from agenthub.storage.lease import Lease
from agenthub.storage.postgres import PostgresSessionStore, open_database
from agenthub.storage.postgres.backend import PostgresStores
from agenthub.storage.postgres.usage import PostgresUsageStore
from agenthub.storage.usage import Claim, Scope
from tests.support.leases import claimed, session_lease

TTL_S = 30.0


def key(n: int) -> SessionKey:
    return session_key("default", "http", f"c{n}")


async def claim(store: PostgresSessionStore, k: SessionKey, holder: str) -> Lease | None:
    return await claimed(store, k, holder, TTL_S)


async def test_claims_asked_for_together_go_in_one_statement_each_with_its_own_grant_and_records(
    pg_two: list[PostgresSessionStore],
) -> None:
    a, b = pg_two
    keys = [key(n) for n in range(8)]
    for n, k in enumerate(keys):  # written by b, one record per session (and its number of them)
        lease = await claim(b, k, "b")
        assert lease is not None
        await b.append(k, [{"role": "user", "content": f"{k.chat_id}-{i}"} for i in range(n + 1)])
        await b.let_go(k, lease)
    first = asyncio.create_task(claim(a, keys[0], "a"))  # goes at once: the others wait for it, then go together
    await asyncio.sleep(0)
    before = a.claims.statements
    leases = await asyncio.gather(first, *(claim(a, k, "a") for k in keys[1:]))
    assert a.claims.statements - before <= 2
    assert all(lease is not None for lease in leases)
    assert len({(lease.name, lease.token) for lease in leases if lease is not None}) == len(keys)
    for n, k in enumerate(keys):  # each claim brought its own session's records (the load that follows takes them)
        assert [r["content"] for r in await a.load(k)] == [f"{k.chat_id}-{i}" for i in range(n + 1)]
        await a.append(k, [{"role": "assistant", "content": "a"}])  # under its own token: not fenced


async def test_a_batch_refuses_the_session_held_elsewhere_and_grants_the_others(
    pg_two: list[PostgresSessionStore],
) -> None:
    a, b = pg_two
    keys = [key(n) for n in range(4)]
    held = await claim(b, keys[2], "b")
    assert held is not None
    leases = await asyncio.gather(*(claim(a, k, "a") for k in keys))
    assert [lease is None for lease in leases] == [False, False, True, False]
    await b.append(keys[2], [{"role": "user", "content": "still b's"}])  # b's lease and fence untouched
    assert [r["content"] for r in await b.load(keys[2])] == ["still b's"]


async def test_two_instances_claiming_the_same_sessions_at_once_never_both_hold_one(
    pg_two: list[PostgresSessionStore],
) -> None:
    """Round after round both claim every session at the same moment (each instance's claims in batches): per
    session exactly one is granted, and the tokens only rise."""
    keys = [key(n) for n in range(12)]
    tokens: dict[SessionKey, int] = {}
    for _ in range(15):
        a_leases, b_leases = await asyncio.gather(
            asyncio.gather(*(claim(pg_two[0], k, "a") for k in keys)),
            asyncio.gather(*(claim(pg_two[1], k, "b") for k in keys)),
        )
        for k, la, lb in zip(keys, a_leases, b_leases, strict=True):
            assert (la is None) != (lb is None), k  # exactly one: nobody holds them between rounds
            lease = la or lb
            assert lease is not None and lease.token > tokens.get(k, 0)
            tokens[k] = lease.token
        for store, leases in ((pg_two[0], a_leases), (pg_two[1], b_leases)):
            held = [(k, lease) for k, lease in zip(keys, leases, strict=True) if lease is not None]
            await asyncio.gather(*(store.append(k, [{"role": "user", "content": "x"}]) for k, _ in held))
            await asyncio.gather(*(store.let_go(k, lease) for k, lease in held))


async def test_riding_claims_against_batched_claims_of_the_same_sessions_never_deadlock_nor_share_one(
    pg_two: list[PostgresSessionStore],
) -> None:
    """a's claims each carry a budget reservation of the same agent and chats (alone in their statements: lease,
    session lock, then budget locks), b's go in batches (leases and session locks, session after session): round
    after round at the same moment, exactly one holds each session, and every reservation made was a's granted
    claim's. A deadlock would surface as a StorageError."""
    a, b = pg_two
    usage = PostgresUsageStore(a.database)
    keys = [key(n) for n in range(8)]
    made = 0
    for round_ in range(12):
        rides = {k: usage.ride(_claims(k), "2026-12-05", 10, 60.0) for k in keys}
        a_claims, b_leases = await asyncio.gather(
            asyncio.gather(*(a.claim(k, session_lease(k), "a", TTL_S, ride=rides[k]) for k in keys)),
            asyncio.gather(*(claim(b, k, "b") for k in keys)),
        )
        for k, got_a, lease_b in zip(keys, a_claims, b_leases, strict=True):
            assert (got_a is None) != (lease_b is None), (round_, k)
            assert (rides[k].rows is not None) == (got_a is not None)  # reserved only with the grant
            made += rides[k].rows is not None
        for k, got_a in zip(keys, a_claims, strict=True):
            if got_a is not None:
                await usage.release(rides[k].id)
                await a.let_go(k, Lease(session_lease(k), "a", got_a.token, 0.0))
        await asyncio.gather(*(b.let_go(k, lease) for k, lease in zip(keys, b_leases, strict=True) if lease))
    assert made > 0


def _claims(k: SessionKey) -> list[Claim]:
    return [Claim(Scope("agent", "", k.agent), day_limit=10**6), Claim(Scope("chat", k.channel, k.chat_id), 10**6)]


async def test_a_claim_whose_caller_was_cancelled_gives_its_grant_back(pg_two: list[PostgresSessionStore]) -> None:
    """Cancelled while its claim is in flight, or queued behind one: the lease granted meanwhile is let go (nobody
    here holds it), so another instance takes the session at once instead of after the lease's time."""
    a, b = pg_two
    keys = [key(n) for n in range(3)]
    in_flight = asyncio.create_task(claim(a, keys[0], "a"))
    await asyncio.sleep(0)
    queued = asyncio.create_task(claim(a, keys[1], "a"))
    kept = asyncio.create_task(claim(a, keys[2], "a"))
    await asyncio.sleep(0)
    for task in (in_flight, queued):
        task.cancel()
    results = await asyncio.gather(in_flight, queued, kept, return_exceptions=True)
    assert [isinstance(r, asyncio.CancelledError) for r in results] == [True, True, False]
    await a.claims.close()
    assert await claim(b, keys[0], "b") is not None
    assert await claim(b, keys[1], "b") is not None
    assert await claim(b, keys[2], "b") is None  # the one whose caller waited is a's
    again = await claim(a, keys[1], "a")  # given back, then taken by b: a is refused, not handed b's grant
    assert again is None


async def test_a_claim_sent_after_a_cancelled_one_is_not_let_go_by_its_give_back(
    pg_two: list[PostgresSessionStore],
) -> None:
    """The same holder's next claim of the session would be renewed with the given-back grant's token: it waits
    for that let-go, so the let-go cannot expire the new grant."""
    a, b = pg_two
    k, other = key(0), key(1)
    in_flight = asyncio.create_task(claim(a, other, "a"))  # the batch in flight: the cancelled one waits behind it
    await asyncio.sleep(0)
    cancelled = asyncio.create_task(claim(a, k, "a"))
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.gather(in_flight, cancelled, return_exceptions=True)
    again = await claim(a, k, "a")
    assert again is not None
    await a.claims.close()
    assert await claim(b, k, "b") is None  # a holds it still
    await a.append(k, [{"role": "user", "content": "a's"}])


async def test_closing_the_stores_waits_for_a_cancelled_claim_s_grant_to_be_given_back(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """A shutdown cancels the turns, a claim among them, and closes the stores: the claim's grant is given back
    before the pool closes, so another instance takes the session at once (not after the lease's time), and no
    pool is opened again behind the close."""
    stores = PostgresStores(await open_database(postgres_dsn), tmp_path)
    sessions = stores.sessions
    assert isinstance(sessions, PostgresSessionStore)
    k = key(0)
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as other:
        async with other.transaction():  # the session's lock: the claim takes the lease, then waits for it
            await other.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (str(k),))
            claiming = asyncio.create_task(sessions.claim(k, session_lease(k), "a", TTL_S))
            while not await _waiting_for_a_lock(other):  # noqa: ASYNC110 (the claim reaches the server)
                await asyncio.sleep(0.01)
            claiming.cancel()  # the shutdown cancels the turn
            await asyncio.gather(claiming, return_exceptions=True)
            closing = asyncio.create_task(stores.aclose())
            await asyncio.sleep(0.3)
        await closing  # the claim's batch answered once the lock went: its grant given back before the pool closed
        cursor = await other.execute("SELECT agenthub_lease_acquire_or_ask(%s, 'b', 30)", (session_lease(k),))
        row = await cursor.fetchone()
        assert row is not None and row[0] is not None  # free: taken by another instance at once
        cursor = await other.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        row = await cursor.fetchone()
        assert row is not None and row[0] == 0  # no pool opened again after the close


async def _waiting_for_a_lock(conn: psycopg.AsyncConnection[TupleRow]) -> bool:
    cursor = await conn.execute("SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted)")
    row = await cursor.fetchone()
    return row is not None and row[0] is True
