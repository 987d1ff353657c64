"""Let-gos on PostgreSQL: the sessions an instance lets go together are released in one statement, each with its
own meta (refused alone when a newer lease fenced it), and many claims, renewals and batched let-gos of two
instances at once never deadlock."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from agenthub.session_keys import SessionKey, session_key
from agenthub.storage.lease import Lease
from agenthub.storage.meta import SessionMeta
from agenthub.storage.postgres import PostgresLeases, PostgresSessionStore, postgres_store_factory
from tests.support.leases import claimed, session_lease
from tests.support.postgres import PostgresServer, migrated, waiting_for_locks

TTL_S = 30.0
SESSIONS = 24
ROUNDS = 40
PER_ROUND = 10


def key(n: int) -> SessionKey:
    return session_key("default", "http", f"s{n}")


async def claim(store: PostgresSessionStore, k: SessionKey, holder: str) -> Lease | None:
    return await claimed(store, k, holder, TTL_S)


async def live_leases(store: PostgresSessionStore) -> int:
    async with store.database.connection("count") as conn:
        cursor = await conn.execute("SELECT count(*) FROM leases WHERE expires_at > now()")
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def test_sessions_let_go_together_go_in_one_statement_each_with_its_own_meta(
    pg_two: list[PostgresSessionStore],
) -> None:
    a, b = pg_two
    keys = [key(n) for n in range(6)]
    leases = [await claim(a, k, "a") for k in keys]
    for n, k in enumerate(keys):
        await a.write_meta(k, SessionMeta(k.chat_id, created_at=n + 1), durable=False)  # written behind the lease
    assert await claim(b, keys[0], "b") is None  # live: b is refused, a keeps it
    before = a.let_gos.statements
    await asyncio.gather(*(a.let_go(k, lease) for k, lease in zip(keys, leases, strict=True) if lease is not None))
    assert a.let_gos.statements - before <= 2  # the first at once, the rest together behind it
    assert await live_leases(a) == 0
    for n, k in enumerate(keys):
        meta = await b.read_meta(k)
        assert meta is not None and meta.created_at == n + 1


async def test_a_let_go_s_meta_and_names_arrive_as_written_whatever_characters_they_hold(
    pg_two: list[PostgresSessionStore],
) -> None:
    """The let-gos' rows go as one JSON parameter: quotes, backslashes, braces, commas, newlines, non-ASCII text
    and a let-go without meta arrive as they were, each with its own session."""
    a, b = pg_two
    titles = ['say "hi", {x}', "back\\slash\nnew line", "中文 \u00e9t\u00e9 \U0001f600", "NULL"]
    keys = [session_key("default", "http", chat) for chat in ('q"uote', "a,{b}", "中文", "NULL")]
    leases = [lease for k in keys if (lease := await claim(a, k, "a")) is not None]
    assert len(leases) == len(keys)
    for k, title in zip(keys[:3], titles, strict=False):  # the last one has no meta written behind
        await a.write_meta(k, SessionMeta(k.chat_id, title=title), durable=False)
    await asyncio.gather(*(a.let_go(k, lease) for k, lease in zip(keys, leases, strict=True)))
    assert await live_leases(a) == 0
    for k, title in zip(keys[:3], titles, strict=False):
        meta = await b.read_meta(k)
        assert meta is not None and (meta.chat_id, meta.title) == (k.chat_id, title)
    assert await b.read_meta(keys[3]) is None
    assert [await claim(b, k, "b") is not None for k in keys] == [True] * len(keys)  # free, under their own names


async def test_the_sessions_of_let_gos_whose_callers_were_cancelled_are_let_go_all_the_same(
    pg_two: list[PostgresSessionStore],
) -> None:
    """A caller cancelled (its turn's shutdown) while its let-go is in flight, or queued behind one, stops waiting;
    the sessions are released with their metas all the same, and the other callers get their answers."""
    a, b = pg_two
    keys = [key(n) for n in range(4)]
    leases = [lease for k in keys if (lease := await claim(a, k, "a")) is not None]
    assert len(leases) == len(keys)
    for n, k in enumerate(keys):
        await a.write_meta(k, SessionMeta(k.chat_id, created_at=n + 1), durable=False)
    first = asyncio.create_task(a.let_go(keys[0], leases[0]))
    await asyncio.sleep(0)  # in flight
    queued = [asyncio.create_task(a.let_go(k, lease)) for k, lease in zip(keys[1:], leases[1:], strict=True)]
    await asyncio.sleep(0)
    for task in (first, queued[0]):
        task.cancel()
    results = await asyncio.gather(first, *queued, return_exceptions=True)
    assert [isinstance(r, asyncio.CancelledError) for r in results] == [True, True, False, False]
    await a.let_gos.close()
    assert await live_leases(a) == 0
    for n, k in enumerate(keys):
        meta = await b.read_meta(k)
        assert meta is not None and meta.created_at == n + 1


async def test_many_claims_renewals_and_batched_let_gos_of_two_instances_at_once_never_deadlock(
    pg_two: list[PostgresSessionStore],
) -> None:
    """Each instance claims random sessions at once, renews what it holds in one statement and lets them all go
    together, round after round, against the other doing the same: a deadlock would surface as a StorageError
    (PostgreSQL aborts one of the two)."""
    keys = [key(n) for n in range(SESSIONS)]
    let_gos = 0

    async def instance(store: PostgresSessionStore, holder: str, seed: int) -> None:
        nonlocal let_gos
        rng, renewer = random.Random(seed), PostgresLeases(store.database)
        for _ in range(ROUNDS):
            wanted = rng.sample(keys, PER_ROUND)
            granted = await asyncio.gather(*(claim(store, k, holder) for k in wanted))
            held = [(k, lease) for k, lease in zip(wanted, granted, strict=True) if lease is not None]
            await asyncio.gather(*(store.append(k, [{"role": "user", "content": holder}]) for k, _ in held))
            for k, _ in held:  # written behind: each let-go takes its session's lock too
                await store.write_meta(k, SessionMeta(k.chat_id, title=holder), durable=False)
            leases = [lease for _, lease in held]
            await asyncio.gather(renewer.renew_many(leases, TTL_S), *(store.let_go(k, lease) for k, lease in held))
            let_gos += len(held)

    statements_before = sum(s.let_gos.statements for s in pg_two)
    async with asyncio.timeout(120):
        await asyncio.gather(instance(pg_two[0], "a", 1), instance(pg_two[1], "b", 2))
    assert let_gos > 0
    assert sum(s.let_gos.statements for s in pg_two) - statements_before < let_gos  # batched
    assert await live_leases(pg_two[0]) == 0  # every lease let go


@pytest.fixture
def icu_dsn(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh migrated database whose default collation is not code-point order (ICU en-US, as a database
    created with a system locale such as en_US.UTF-8 or zh_CN.UTF-8 sorts): "alice" before "Bob"."""
    name = f"t_icu_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        conn.execute(
            f"CREATE DATABASE \"{name}\" TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'"
        )
    dsn = postgres_server.dsn(name)
    try:
        yield migrated(dsn)
    finally:
        postgres_server.drop_database(dsn)


async def test_a_renewal_and_a_let_go_of_the_same_leases_never_deadlock_whatever_the_database_collation(
    icu_dsn: str,
) -> None:
    """The let-gos of several sessions lock their lease rows in code-point order (sorted in Python); a renewal
    locking them by the database's collation would take them in the other order when that is not code-point order
    ("Bob" < "alice" by code point, "alice" < "Bob" in en-US): the let-go holds Bob's row and waits for alice's,
    the renewal holds alice's and waits for Bob's, and PostgreSQL aborts one of the two (40P01)."""
    store = await postgres_store_factory(icu_dsn)
    renewer = PostgresLeases(store.database)
    bob, alice = session_key("default", "http", "Bob"), session_key("default", "http", "alice")
    try:
        leases = [await claim(store, k, "a") for k in (bob, alice)]
        assert all(lease is not None for lease in leases)
        for k in (bob, alice):  # written behind: the let-go takes each session's lock after its lease row
            await store.write_meta(k, SessionMeta(k.chat_id, title="t"), durable=False)
        blocker = await psycopg.AsyncConnection.connect(icu_dsn, autocommit=True)
        async with blocker, blocker.transaction():  # Bob's session lock held: the let-go stops after Bob's lease row
            await blocker.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("default:http:Bob",))
            let_go = asyncio.gather(
                *(store.let_go(k, lease) for k, lease in zip((bob, alice), leases, strict=True) if lease)
            )
            await waiting_for_locks(icu_dsn, 1)
            renewal = asyncio.create_task(renewer.renew_many([lease for lease in leases if lease], TTL_S))
            await waiting_for_locks(icu_dsn, 2)
        async with asyncio.timeout(20):
            await let_go
            await renewal
        assert await live_leases(store) == 0
    finally:
        await store.close()


async def _freed_names(dsn: str, ready: asyncio.Event, until: str) -> list[str]:
    """The names announced on `agenthub_lease_freed` (LISTEN in place once `ready` is set), up to `until`'s."""
    heard: list[str] = []
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("LISTEN agenthub_lease_freed")
        ready.set()
        async for notice in conn.notifies(timeout=30.0):
            heard.append(notice.payload)
            if notice.payload == until:
                break
    return heard


async def test_a_release_is_announced_only_when_another_instance_asked_for_the_lease(
    pg_two: list[PostgresSessionStore], postgres_dsn: str
) -> None:
    """A session that moves is let go on every turn: its release goes to every listening instance only when one
    was refused it (and so waits to hear); announcements arrive in commit order, so one sent for a release nobody
    asked for would come before the asked one's."""
    a, b = pg_two
    alone, asked, plain = key(0), key(1), key(2)
    ready = asyncio.Event()
    listener = asyncio.create_task(_freed_names(postgres_dsn, ready, session_lease(asked)))
    await ready.wait()
    first = await claim(a, alone, "a")
    assert first is not None
    await a.let_go(alone, first)  # nobody asked: not announced
    held = await claim(a, asked, "a")
    assert held is not None and await claim(b, asked, "b") is None  # refused: b asks for it
    leases = PostgresLeases(a.database)
    plain_lease = await leases.acquire(session_lease(plain), "a", TTL_S)
    assert plain_lease is not None
    await leases.release(plain_lease)  # the plain lease store's release, nobody asked: not announced either
    await a.let_go(asked, held)
    async with asyncio.timeout(30):
        assert await listener == [session_lease(asked)]
    regained = await claim(b, asked, "b")  # the grant clears the mark: b's own release goes unannounced
    assert regained is not None
    async with a.database.connection("read the mark") as conn:
        cursor = await conn.execute("SELECT asked FROM leases WHERE name = %s", [session_lease(asked)])
        assert await cursor.fetchone() == (False,)


async def test_a_refused_acquire_or_ask_marks_the_lease_asked_and_its_release_is_announced(
    pg_two: list[PostgresSessionStore], postgres_dsn: str
) -> None:
    leases = PostgresLeases(pg_two[0].database)
    ready = asyncio.Event()
    listener = asyncio.create_task(_freed_names(postgres_dsn, ready, "lease:asked"))
    await ready.wait()
    held = await leases.acquire_or_ask("lease:asked", "a", TTL_S)
    assert held is not None
    assert await leases.acquire_or_ask("lease:asked", "b", TTL_S) is None
    await leases.release(held)
    async with asyncio.timeout(30):
        assert await listener == ["lease:asked"]
    granted = await leases.acquire_or_ask("lease:asked", "b", TTL_S)
    assert granted is not None and granted.token > held.token


async def test_an_acquire_or_ask_refused_behind_another_instance_s_first_grant_marks_the_lease_asked(
    pg_two: list[PostgresSessionStore], postgres_dsn: str
) -> None:
    """B asks for a lease nobody held while A's first grant of it (the row's insert) is not yet committed: B waits
    for it, is refused, and must mark the lease asked, or A's release is never announced to B (who waits for it)."""
    leases = PostgresLeases(pg_two[0].database)
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as first:
        await first.execute(
            "INSERT INTO leases (name, holder, token, expires_at) "
            "VALUES ('lease:raced', 'a', 1, now() + interval '30 s')"
        )
        asking = asyncio.create_task(leases.acquire_or_ask("lease:raced", "b", TTL_S))
        await waiting_for_locks(postgres_dsn, 1)  # B's insert waits for A's
        await first.commit()
    async with asyncio.timeout(30):
        assert await asking is None
    async with pg_two[0].database.connection("read the mark") as conn:
        cursor = await conn.execute("SELECT asked FROM leases WHERE name = 'lease:raced'")
        assert await cursor.fetchone() == (True,)


async def test_a_session_claim_refused_behind_another_instance_s_first_grant_marks_the_lease_asked(
    pg_two: list[PostgresSessionStore], postgres_dsn: str
) -> None:
    """The same race for the session claim (`agenthub_session_claim`): B refused behind A's uncommitted first grant
    marks the lease asked."""
    raced = key(7)
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as first:
        await first.execute(
            "INSERT INTO leases (name, holder, token, expires_at) VALUES (%s, 'a', 1, now() + interval '30 s')",
            [session_lease(raced)],
        )
        asking = asyncio.create_task(claim(pg_two[1], raced, "b"))
        await waiting_for_locks(postgres_dsn, 1)  # B's insert waits for A's
        await first.commit()
    async with asyncio.timeout(30):
        assert await asking is None
    async with pg_two[0].database.connection("read the mark") as conn:
        cursor = await conn.execute("SELECT asked FROM leases WHERE name = %s", [session_lease(raced)])
        assert await cursor.fetchone() == (True,)


async def test_a_claim_refused_by_a_lease_released_while_it_waited_for_the_row_announces_it_free(
    pg_two: list[PostgresSessionStore], postgres_dsn: str
) -> None:
    """A's let-go takes the lease's row while B's claim, sent just before, waits for it: the release's time is later
    than B's transaction's start (`now()`), so B is refused a lease that is free, and marks it asked only after the
    let-go went unannounced. B's refusal itself announces it free, so B tries again at once (not at its poll)."""
    a, b = pg_two
    raced = key(8)
    held = await claim(a, raced, "a")
    assert held is not None
    ready = asyncio.Event()
    listener = asyncio.create_task(_freed_names(postgres_dsn, ready, session_lease(raced)))
    await ready.wait()
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as let_go:
        await let_go.execute("SELECT 1 FROM leases WHERE name = %s FOR UPDATE", [session_lease(raced)])
        asking = asyncio.create_task(claim(b, raced, "b"))
        await waiting_for_locks(postgres_dsn, 1)  # B's claim began, and waits for the row
        await let_go.execute("UPDATE leases SET expires_at = clock_timestamp() WHERE name = %s", [session_lease(raced)])
        await let_go.commit()  # released after B's transaction began, nobody asked yet: not announced
    async with asyncio.timeout(30):
        assert await asking is None
        assert await listener == [session_lease(raced)]
    assert await claim(b, raced, "b") is not None


async def test_a_meta_holding_a_lone_surrogate_is_let_go_with_its_session_and_the_others_are_let_go_too(
    pg_two: list[PostgresSessionStore],
) -> None:
    """A title written behind from a user's first words with a lone surrogate goes with its session's let-go like
    any other meta: it must not fail the statement that releases the other sessions' leases too."""
    a, b = pg_two
    keys = [key(n) for n in range(4)]
    leases = [lease for k in keys if (lease := await claim(a, k, "a")) is not None]
    assert len(leases) == len(keys)
    await a.write_meta(keys[0], SessionMeta(keys[0].chat_id, title="lone \udfff"), durable=False)
    await asyncio.gather(*(a.let_go(k, lease) for k, lease in zip(keys, leases, strict=True)))
    assert await live_leases(a) == 0
    meta = await b.read_meta(keys[0])
    assert meta is not None and meta.title == "lone \udfff"
