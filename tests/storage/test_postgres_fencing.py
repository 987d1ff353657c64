"""Fencing on PostgreSQL: a session's writes carry the fencing token of its lease; a write under a token older than
the session's fence is refused whole, in the same transaction, so two instances never interleave a history."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio

from agenthub.session_keys import session_key
from agenthub.storage.meta import SessionMeta
from agenthub.storage.postgres import PostgresLeases, PostgresSessionStore, postgres_store_factory
from agenthub.storage.store import FencedWriteError

KEY = session_key("default", "http", "fenced")
ROUNDS = 12
WRITES_PER_ROUND = 8


def msg(text: str, role: str = "user", **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": text, "timestamp": 1, **extra}


@pytest_asyncio.fixture
async def two_stores(postgres_dsn: str) -> AsyncIterator[tuple[PostgresSessionStore, PostgresSessionStore]]:
    """Two stores with a pool each: two instances of one deployment."""
    first = await postgres_store_factory(postgres_dsn)
    second = await postgres_store_factory(postgres_dsn)
    try:
        yield first, second
    finally:
        await first.close()
        await second.close()


def contents(records: list[dict[str, Any]]) -> list[Any]:
    return [r["content"] for r in records]


async def test_fence_says_whether_someone_else_fenced_the_session_since(
    two_stores: tuple[PostgresSessionStore, PostgresSessionStore],
) -> None:
    a, b = two_stores
    assert await a.fence(KEY, 1) is True  # never fenced by this store: it cannot know what happened before
    assert await a.fence(KEY, 2) is False  # its own last token: nobody else wrote since
    assert await b.fence(KEY, 3) is True
    assert await a.fence(KEY, 4) is True  # b held the session in between
    assert await a.fence(KEY, 5) is False


WRITES: dict[str, Callable[[PostgresSessionStore], Awaitable[Any]]] = {
    "append": lambda s: s.append(KEY, [msg("late"), msg("late too", "assistant")]),
    "replace": lambda s: s.replace(KEY, [msg("late")], archive=[msg("late archive")]),
    "clear": lambda s: s.clear(KEY, archive=[msg("late archive")]),
    "rewrite_archive": lambda s: s.rewrite_archive(KEY, [msg("late archive")]),
    "delete": lambda s: s.delete(KEY),
    "write_meta": lambda s: s.write_meta(KEY, SessionMeta(chat_id=KEY.chat_id, title="late"), durable=True),
}


@pytest.mark.parametrize("write", sorted(WRITES))
async def test_a_late_write_under_an_older_token_is_refused_and_nothing_of_it_lands(
    two_stores: tuple[PostgresSessionStore, PostgresSessionStore], write: str
) -> None:
    a, b = two_stores
    await a.fence(KEY, 1)
    await a.append(KEY, [msg("from a")])
    await a.replace(KEY, [msg("from a")], archive=[msg("a's archive")])
    await b.fence(KEY, 2)  # a's lease expired; b was granted the next token
    await b.append(KEY, [msg("from b")])
    await b.write_meta(KEY, SessionMeta(chat_id=KEY.chat_id, title="b's"), durable=True)
    with pytest.raises(FencedWriteError):
        await WRITES[write](a)
    assert contents(await b.load(KEY)) == ["from a", "from b"]
    assert contents(await b.read_archive(KEY)) == ["a's archive"]
    meta = await b.read_meta(KEY)
    assert meta is not None and meta.title == "b's"
    with pytest.raises(FencedWriteError):
        await a.fence(KEY, 1)  # a token older than the fence cannot fence again either


async def test_a_late_meta_written_behind_is_refused_when_the_lease_ends_and_nothing_of_it_lands(
    two_stores: tuple[PostgresSessionStore, PostgresSessionStore],
) -> None:
    """A meta written behind under a held lease goes with the lease's release (one round trip): refused then."""
    a, b = two_stores
    await a.fence(KEY, 1)
    await b.fence(KEY, 2)
    await b.write_meta(KEY, SessionMeta(chat_id=KEY.chat_id, title="b's"), durable=True)
    await a.write_meta(KEY, SessionMeta(chat_id=KEY.chat_id, title="late"), durable=False)
    await a.fence(KEY, None)
    meta = await b.read_meta(KEY)
    assert meta is not None and meta.title == "b's"
    assert (await a.read_meta(KEY)) == meta


async def test_the_fence_survives_clear_and_delete(
    two_stores: tuple[PostgresSessionStore, PostgresSessionStore],
) -> None:
    a, b = two_stores
    await a.fence(KEY, 1)
    await a.append(KEY, [msg("x")])
    await b.fence(KEY, 2)
    await b.clear(KEY, archive=[msg("x")])
    with pytest.raises(FencedWriteError):
        await a.append(KEY, [msg("after clear")])
    await b.delete(KEY)
    with pytest.raises(FencedWriteError):
        await a.append(KEY, [msg("after delete")])
    assert await b.load(KEY) == []


async def test_two_instances_alternating_the_lease_never_interleave_records(
    two_stores: tuple[PostgresSessionStore, PostgresSessionStore],
) -> None:
    """Each round one instance takes the lease over while the other, not knowing it lost it, keeps writing: every
    late write is refused, so each round's records are one instance's, and none of an older holder's come after
    a newer holder's first record."""
    a, b = two_stores
    leases = PostgresLeases(a.database)
    stores = [a, b]
    name = f"session:{KEY}"
    previous = None
    for round_no in range(ROUNDS):
        store = stores[round_no % 2]
        holder = f"instance-{round_no % 2}"
        if previous is not None:
            await leases.release(previous)
        lease = await leases.acquire(name, holder, 15.0)
        assert lease is not None
        await store.fence(KEY, lease.token)
        stale = stores[(round_no + 1) % 2]
        start = asyncio.Event()

        async def write(s: PostgresSessionStore, tag: str, start: asyncio.Event = start) -> str:
            await start.wait()
            try:
                await s.append(KEY, [msg(tag)])
            except FencedWriteError:
                return "refused"
            return "stored"

        holder_writes = [asyncio.create_task(write(store, f"{round_no}:new:{i}")) for i in range(WRITES_PER_ROUND)]
        late_writes = [asyncio.create_task(write(stale, f"{round_no}:old:{i}")) for i in range(WRITES_PER_ROUND)]
        await asyncio.sleep(0)
        start.set()  # the holder and the stale instance write at the same moment
        assert await asyncio.gather(*holder_writes) == ["stored"] * WRITES_PER_ROUND
        outcomes = await asyncio.gather(*late_writes)
        if round_no > 0:
            assert outcomes == ["refused"] * WRITES_PER_ROUND
        previous = lease
    tags = contents(await a.load(KEY))
    rounds = [int(t.split(":")[0]) for t in tags if ":new:" in t]
    assert rounds == sorted(rounds) and len(rounds) == ROUNDS * WRITES_PER_ROUND
    assert [t for t in tags if ":old:" in t and not t.startswith("0:")] == []
