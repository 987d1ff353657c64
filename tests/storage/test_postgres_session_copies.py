"""A session that moves between instances on PostgreSQL: its lease and fence in one request (`claim`), and each
instance's copy of the history brought up to date with only the records written since it last read it, while
every instance still reads every record, in order, once (also after another instance rewrote the history)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from agenthub.session_keys import SessionKey, session_key
from agenthub.storage.lease import Lease
from agenthub.storage.meta import SessionMeta
from agenthub.storage.postgres import PostgresLeases, PostgresSessionStore, postgres_store_factory
from agenthub.storage.store import FencedWriteError

KEY = session_key("default", "http", "moving")
NAME = f"session:{KEY}"
TTL_S = 30.0


def msg(text: str, role: str = "user") -> dict[str, Any]:
    return {"role": role, "content": text, "timestamp": 1}


def contents(records: list[dict[str, Any]]) -> list[Any]:
    return [r["content"] for r in records]


@pytest_asyncio.fixture
async def three(postgres_dsn: str) -> AsyncIterator[list[PostgresSessionStore]]:
    """Three stores with a pool each: three instances of one deployment."""
    stores = [await postgres_store_factory(postgres_dsn) for _ in range(3)]
    try:
        yield stores
    finally:
        for store in stores:
            await store.close()


async def _hold(store: PostgresSessionStore, holder: str) -> Lease:
    claim = await store.claim(KEY, NAME, holder, TTL_S)
    assert claim is not None and not claim.fenced_out
    return Lease(NAME, holder, claim.token, 0.0)


async def _let_go(store: PostgresSessionStore, key: SessionKey, lease: Lease) -> None:
    await store.fence(key, None)
    await PostgresLeases(store.database).release(lease)


async def test_three_instances_writing_one_session_in_turn_each_read_every_record_in_order_once(
    three: list[PostgresSessionStore],
) -> None:
    written: list[str] = []
    earlier: dict[int, list[dict[str, Any]]] = {}
    for turn in range(9):
        index = turn % 3
        store = three[index]
        lease = await _hold(store, f"instance-{index}")
        history = await store.load(KEY)
        assert contents(history) == written  # every record, in order, once
        if earlier.get(index):  # its copy, brought up to date; a caller's changes to what it read stay its own
            earlier[index][0]["content"] = "changed by a caller"
        texts = [f"t{turn} question", f"t{turn} answer"]
        await store.append(KEY, [msg(texts[0]), msg(texts[1], "assistant")])
        written += texts
        assert contents(await store.load(KEY)) == written
        earlier[index] = history
        await _let_go(store, KEY, lease)
    for store in three:
        assert contents(await store.load(KEY)) == written


async def test_a_copy_is_read_again_in_full_after_another_instance_replaced_or_cleared_the_history(
    three: list[PostgresSessionStore],
) -> None:
    a, b, _ = three
    await a.append(KEY, [msg("one"), msg("two", "assistant"), msg("three")])
    assert contents(await a.load(KEY)) == ["one", "two", "three"]
    await b.replace(KEY, [msg("summary")], archive=[msg("one")])
    await b.append(KEY, [msg("four"), msg("five"), msg("six")])  # the seqs go on past a's copy
    assert contents(await a.load(KEY)) == ["summary", "four", "five", "six"]
    await b.clear(KEY, archive=[])
    await b.append(KEY, [msg(f"new {n}") for n in range(6)])  # seqs start at 0 again, as many as a's copy and more
    assert contents(await a.load(KEY)) == [f"new {n}" for n in range(6)]
    await b.delete(KEY)
    assert await a.load(KEY) == []


async def test_a_claim_is_refused_while_another_instance_holds_the_session_and_fences_it_when_granted(
    three: list[PostgresSessionStore],
) -> None:
    a, b, _ = three
    first = await _hold(a, "a")
    assert await b.claim(KEY, NAME, "b", TTL_S) is None
    await a.append(KEY, [msg("under a")])
    await PostgresLeases(a.database).release(first)  # a's token stays on its writes: a late one is refused
    claim = await b.claim(KEY, NAME, "b", TTL_S)
    assert claim is not None and claim.token > first.token and claim.moved
    with pytest.raises(FencedWriteError):
        await a.append(KEY, [msg("late")])
    await b.append(KEY, [msg("under b")])
    assert contents(await a.load(KEY)) == ["under a", "under b"]


async def test_the_claim_of_a_moved_session_brings_its_new_records_and_meta_so_the_reads_after_it_need_no_trip(
    three: list[PostgresSessionStore],
) -> None:
    a, b, _ = three
    lease = await _hold(b, "b")
    await b.append(KEY, [msg("one"), msg("two", "assistant")])
    assert contents(await b.load(KEY)) == ["one", "two"]
    await _let_go(b, KEY, lease)
    lease = await _hold(a, "a")
    await a.append(KEY, [msg("three")])
    await a.write_meta(KEY, SessionMeta(chat_id=KEY.chat_id, title="by a", updated_at=5), durable=True)
    await _let_go(a, KEY, lease)
    claim = await b.claim(KEY, NAME, "b", TTL_S)
    assert claim is not None and claim.moved
    trips = b.database.latency.count
    assert contents(await b.load(KEY)) == ["one", "two", "three"]
    meta = await b.read_meta(KEY)
    assert meta is not None and meta.title == "by a"
    assert b.database.latency.count == trips  # both came with the claim
    await b.append(KEY, [msg("four")])
    assert contents(await b.load(KEY)) == ["one", "two", "three", "four"]  # read again after a write
    assert b.database.latency.count == trips + 2


async def test_a_meta_written_behind_under_the_lease_goes_with_the_release_in_one_round_trip(
    three: list[PostgresSessionStore],
) -> None:
    a, b, _ = three
    lease = await _hold(a, "a")
    await a.append(KEY, [msg("one")])
    await a.write_meta(KEY, SessionMeta(chat_id=KEY.chat_id, title="behind", updated_at=7), durable=False)
    assert await b.read_meta(KEY) is None  # waits for the release
    mine = await a.read_meta(KEY)
    assert mine is not None and mine.title == "behind"
    trips = a.database.latency.count
    await a.let_go(KEY, lease)
    assert a.database.latency.count == trips + 1
    theirs = await b.read_meta(KEY)
    assert theirs is not None and theirs.title == "behind"
    claim = await b.claim(KEY, NAME, "b", TTL_S)
    assert claim is not None and claim.moved
    await b.write_meta(KEY, SessionMeta(chat_id=KEY.chat_id, title="now"), durable=True)  # durable: at once
    now = await a.read_meta(KEY)
    assert now is not None and now.title == "now"


async def test_a_meta_written_behind_by_an_instance_that_lost_the_session_is_refused(
    three: list[PostgresSessionStore],
) -> None:
    a, b, _ = three
    lease = await _hold(a, "a")
    await a.write_meta(KEY, SessionMeta(chat_id=KEY.chat_id, title="stale"), durable=False)
    await PostgresLeases(a.database).release(lease)  # lost, as far as the database is concerned
    assert await b.claim(KEY, NAME, "b", TTL_S) is not None
    await b.write_meta(KEY, SessionMeta(chat_id=KEY.chat_id, title="current"), durable=True)
    await a.fence(KEY, None)  # a's lease ends: what it wrote behind goes under its old token, refused
    meta = await b.read_meta(KEY)
    assert meta is not None and meta.title == "current"


_OLD_REPLACE = (  # what an instance not upgraded to migration 19 runs for a replace (a compaction, a forget)
    "DELETE FROM session_records WHERE agent = %(agent)s AND channel = %(channel)s AND chat_id = %(chat_id)s",
    """WITH head AS (
        INSERT INTO session_heads AS h (agent, channel, chat_id, next_seq, changed_at)
        VALUES (%(agent)s, %(channel)s, %(chat_id)s, %(count)s, now())
        ON CONFLICT (agent, channel, chat_id)
        DO UPDATE SET next_seq = h.next_seq + EXCLUDED.next_seq, changed_at = EXCLUDED.changed_at
        RETURNING next_seq
    )
    INSERT INTO session_records (agent, channel, chat_id, seq, record)
    SELECT %(agent)s, %(channel)s, %(chat_id)s, head.next_seq - %(count)s + t.ord - 1, t.record::json
    FROM head, unnest(%(records)s::text[]) WITH ORDINALITY AS t(record, ord)""",
)


async def test_a_replace_by_an_instance_not_upgraded_yet_still_makes_the_copies_stale(
    three: list[PostgresSessionStore],
) -> None:
    a, b, _ = three
    await a.append(KEY, [msg("secret one"), msg("secret two", "assistant")])
    assert contents(await a.load(KEY)) == ["secret one", "secret two"]  # a keeps its copy
    params = {"agent": KEY.agent, "channel": KEY.channel, "chat_id": KEY.chat_id}
    texts = [
        '{"role": "user", "content": "[redacted]", "timestamp": 1}',
        '{"role": "user", "content": "x", "timestamp": 1}',
    ]
    async with b.database.connection("an old instance's replace") as conn, conn.transaction():
        await conn.execute(_OLD_REPLACE[0], params)
        await conn.execute(_OLD_REPLACE[1], {**params, "count": len(texts), "records": texts})
    assert contents(await a.load(KEY)) == ["[redacted]", "x"]  # not the records the replace removed
