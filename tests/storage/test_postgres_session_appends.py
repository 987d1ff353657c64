"""History appends on PostgreSQL group-committed across sessions: the appends asked for while one batch is written
go together in the next statement (one transaction, one commit), each session's records in order, a session fenced
by a newer lease refused alone, a meta written behind carried by its session's append."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from agenthub.session_keys import session_key
from agenthub.storage.lease import Lease
from agenthub.storage.meta import SessionMeta
from agenthub.storage.postgres import PostgresSessionStore
from agenthub.storage.store import FencedWriteError
from tests.support.postgres import waiting_for_locks

KEYS = [session_key("default", "http", f"s{n}") for n in range(20)]


def msg(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": 1}


async def test_appends_of_twenty_sessions_at_the_same_moment_share_round_trips_and_each_lands_in_order(
    pg_two: list[PostgresSessionStore],
) -> None:
    a, b = pg_two
    trips = a.database.latency.count
    await asyncio.gather(*(a.append(key, [msg(f"{n}.1"), msg(f"{n}.2")]) for n, key in enumerate(KEYS)))
    assert a.database.latency.count - trips <= 2  # the first alone, the 19 asked for meanwhile together
    await asyncio.gather(*(a.append(key, [msg(f"{n}.3")]) for n, key in enumerate(KEYS)))
    for n, key in enumerate(KEYS):
        assert [r["content"] for r in await b.load(key)] == [f"{n}.1", f"{n}.2", f"{n}.3"]


ODD_TEXTS = [
    'say "hi", {x}',
    'back\\slash \\" and\nnew line\ttab',
    "NULL",
    "",
    "中文 été \U0001f600",
]


async def test_records_of_a_batch_arrive_as_they_were_whatever_characters_they_hold(
    pg_two: list[PostgresSessionStore],
) -> None:
    """The appends go as one JSON parameter: quotes, backslashes, braces, control characters, non-ASCII text, a
    lone surrogate arrive as they were, each session's records in order, and the meta with its append."""
    a, b = pg_two
    keys = KEYS[:4]
    await a.write_meta(keys[0], SessionMeta(keys[0].chat_id, title='t "q" \\ {}'), durable=False)
    await asyncio.gather(
        *(a.append(key, [msg(f"{n}:{text}") for text in ODD_TEXTS]) for n, key in enumerate(keys)),
        a.append(KEYS[4], []),
        a.append(KEYS[5], [msg("\ud800 lone")]),  # kept as a `\\ud800` escape in the stored JSON
    )
    for n, key in enumerate(keys):
        assert [r["content"] for r in await b.load(key)] == [f"{n}:{text}" for text in ODD_TEXTS]
    meta = await b.read_meta(keys[0])
    assert meta is not None and meta.title == 't "q" \\ {}'
    assert await b.load(KEYS[4]) == []
    assert [r["content"] for r in await b.load(KEYS[5])] == ["\ud800 lone"]


async def test_a_session_fenced_by_a_newer_lease_is_refused_alone_and_the_others_of_its_batch_land(
    pg_two: list[PostgresSessionStore],
) -> None:
    a, b = pg_two
    fenced, other = KEYS[0], KEYS[1]
    await a.fence(fenced, 1)
    await b.fence(fenced, 2)  # another instance took the session over
    results = await asyncio.gather(
        a.append(fenced, [msg("late")]), a.append(other, [msg("fine")]), return_exceptions=True
    )
    assert isinstance(results[0], FencedWriteError) and results[1] is None
    assert await b.load(fenced) == [] and [r["content"] for r in await b.load(other)] == ["fine"]


@pytest.mark.parametrize("concurrent", [1, 5])
async def test_a_meta_written_behind_goes_with_its_sessions_append(
    pg_two: list[PostgresSessionStore], concurrent: int
) -> None:
    a, b = pg_two
    keys = KEYS[:concurrent]
    for n, key in enumerate(keys):
        await a.fence(key, 1)
        await a.write_meta(key, SessionMeta(key.chat_id, title=f"t{n}", created_at=1, updated_at=1), durable=False)
        assert await b.read_meta(key) is None  # written behind: not yet
    await asyncio.gather(*(a.append(key, [msg("m")]) for key in keys))
    for n, key in enumerate(keys):
        meta = await b.read_meta(key)
        assert meta is not None and meta.title == f"t{n}"


async def test_a_batch_of_appends_and_a_batch_of_let_gos_of_the_same_sessions_never_deadlock(
    postgres_dsn: str, pg_two: list[PostgresSessionStore]
) -> None:
    """Both take the sessions' locks in one order: the let-gos in lease-name order (`session:<key>`), so the
    appends in the keys' order too, not their file stems' (':' is '_' there: "room:1" before "roomA" by key, after it by
    file stem). Here `a`'s late appends (its leases lapsed, `b` claimed the sessions) meet `b`'s let-go of both
    with its meta written behind: in two orders, each would hold one session's lock and wait for the other's."""
    a, b = pg_two
    x1, xa = session_key("default", "http", "room:1"), session_key("default", "http", "roomA")
    for k in (x1, xa):
        assert await a.claim(k, f"session:{k}", "a", 0.2) is not None
    await asyncio.sleep(0.4)  # a's leases lapse
    leases = []
    for k in (x1, xa):
        granted = await b.claim(k, f"session:{k}", "b", 30.0)
        assert granted is not None and granted.token is not None and not granted.fenced_out
        leases.append(Lease(f"session:{k}", "b", granted.token, 0.0))
        await b.write_meta(k, SessionMeta(k.chat_id, title="b"), durable=False)  # goes with the let-go
    blocker = await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True)
    async with blocker, blocker.transaction():  # room:1's lock held: b's let-go waits there, after room:1's lease row
        await blocker.execute("SELECT pg_advisory_xact_lock(hashtextextended('default:http:room:1', 0))")
        let_gos = asyncio.gather(*(b.let_go(k, lease) for k, lease in zip((x1, xa), leases, strict=True)))
        await waiting_for_locks(postgres_dsn, 1)
        written = a._appends.written
        appends = asyncio.gather(a.append(x1, [msg("late")]), a.append(xa, [msg("late")]), return_exceptions=True)
        await waiting_for_locks(postgres_dsn, 2)
    async with asyncio.timeout(20):
        results = await appends
        await let_gos
    assert a._appends.written - written <= 1  # the two appends went in one batch
    assert all(isinstance(r, FencedWriteError) for r in results), results
    for k in (x1, xa):
        meta = await a.read_meta(k)
        assert meta is not None and meta.title == "b"
        assert await a.load(k) == []


async def test_a_session_whose_newest_record_holds_a_lone_surrogate_has_its_meta_read_caught_up(
    pg_two: list[PostgresSessionStore],
) -> None:
    """A lone surrogate is kept as a `\\ud8xx` escape, which the database's JSON operators refuse: the meta's read
    (`updated_at` caught up with the newest record's time) must not depend on them."""
    a, b = pg_two
    key = KEYS[0]
    await a.write_meta(key, SessionMeta("chat", updated_at=5), durable=True)
    await a.append(key, [{"role": "user", "content": "half \ud800 a pair", "timestamp": 1_700_000_000_123}])
    meta = await b.read_meta(key)
    assert meta is not None and meta.updated_at == 1_700_000_000_123
    assert [r["content"] for r in await b.load(key)] == ["half \ud800 a pair"]


async def test_a_meta_holding_a_lone_surrogate_goes_with_its_append_and_the_batch_s_other_appends_land(
    pg_two: list[PostgresSessionStore],
) -> None:
    """A title written behind from a user's first words with a lone surrogate rides its session's append like any
    other meta: it must not fail the statement that carries the other sessions' appends too."""
    a, b = pg_two
    keys = KEYS[:4]
    for k in keys:  # each under a lease, so its meta is written behind and goes with its append
        granted = await a.claim(k, f"session:{k}", "a", 30.0)
        assert granted is not None and not granted.fenced_out
    await a.write_meta(keys[0], SessionMeta(keys[0].chat_id, title="lone \ud800"), durable=False)
    await asyncio.gather(*(a.append(k, [msg(f"{n}")]) for n, k in enumerate(keys)))
    for n, k in enumerate(keys):
        assert [r["content"] for r in await b.load(k)] == [f"{n}"]
    meta = await b.read_meta(keys[0])
    assert meta is not None and meta.title == "lone \ud800"
