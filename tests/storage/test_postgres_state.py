"""The shared state on PostgreSQL beyond histories (memory files, inbox, leases, dedup memory, API tokens) against
a real server: 32 writers at the same moment from two instances, a server that goes away (StorageError with a
fixed text) and comes back (everything resumes)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from agenthub.clock import ManualClock
from agenthub.errors import StorageError
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import web_server
from agenthub.memory.files import MemoryWriter
from agenthub.session_keys import session_key
from agenthub.storage.memory_files import MemoryName
from agenthub.storage.ports import Inbox, LeaseStore, MemoryStore
from agenthub.storage.postgres import (
    Database,
    PostgresInbox,
    PostgresLeases,
    PostgresMemoryStore,
    PostgresSeenIds,
    PostgresTokens,
    open_database,
)
from agenthub.storage.postgres.backend import PostgresStores
from agenthub.storage.postgres.sends import PostgresMemberSends
from agenthub.storage.tokens import TOKEN_PREFIX
from channels.toolkit.dedup import MessageDedup, SeenIds
from tests.support.postgres import PostgresServer, until_it_works

WRITERS = 32
RECOVERY_DEADLINE_S = 60.0
MEETS_THE_PROTOCOLS: tuple[type[MemoryStore], type[Inbox], type[LeaseStore], type[SeenIds]] = (
    PostgresMemoryStore,
    PostgresInbox,
    PostgresLeases,
    PostgresSeenIds,
)  # checked by mypy


@pytest_asyncio.fixture
async def two_instances(postgres_dsn: str) -> AsyncIterator[tuple[Database, Database]]:
    """Two pools on one database, as two daemons have."""
    first = await open_database(postgres_dsn)
    second = await open_database(postgres_dsn)
    try:
        yield first, second
    finally:
        await first.close()
        await second.close()


async def at_the_same_moment(count: int, call: Callable[[int], Awaitable[Any]]) -> list[Any]:
    """`call(0..count-1)`, all released together."""
    start = asyncio.Event()

    async def one(n: int) -> Any:
        await start.wait()
        return await call(n)

    tasks = [asyncio.create_task(one(n)) for n in range(count)]
    await asyncio.sleep(0)
    start.set()
    return await asyncio.gather(*tasks)


async def test_32_new_ids_at_once_from_two_instances_each_seen_once_and_a_redelivery_is_a_duplicate(
    two_instances: tuple[Database, Database],
) -> None:
    a, b = (PostgresSeenIds(db, "wecom/app-1.dedup", ttl_s=600) for db in two_instances)
    firsts = await at_the_same_moment(WRITERS, lambda n: (a if n % 2 else b).check_and_add(f"app-1:m{n // 2}"))
    assert sorted(firsts) == [False] * (WRITERS // 2) + [True] * (WRITERS // 2)  # each id new exactly once
    assert await b.check_and_add("app-1:m3") is True
    other = PostgresSeenIds(two_instances[0], "feishu.dedup", ttl_s=600)
    assert await other.check_and_add("app-1:m3") is False  # another memory is another scope


async def test_an_expired_id_is_new_again_and_purged(two_instances: tuple[Database, Database]) -> None:
    seen = PostgresSeenIds(two_instances[0], "feishu.dedup", ttl_s=0.5)
    assert await seen.check_and_add("om_1") is False
    assert await seen.check_and_add("om_1") is True
    await asyncio.sleep(0.6)
    assert await seen.check_and_add("om_1") is False  # its memory had expired: a new message
    await asyncio.sleep(0.6)
    assert await seen.purge() == 0 and len(seen) == 0


async def test_32_read_modify_writes_from_two_instances_under_a_lease_lose_nothing(
    two_instances: tuple[Database, Database],
) -> None:
    stores = [PostgresMemoryStore(db) for db in two_instances]
    leases = [PostgresLeases(db) for db in two_instances]
    name = MemoryName.chat_memory(session_key("default", "wecom", "group-1"))

    async def add(n: int) -> None:
        store, lease_store = stores[n % 2], leases[n % 2]
        lease = await lease_store.acquire("memory:group-1", f"writer-{n}", ttl_s=30)
        for _ in range(10_000):  # another instance's writer holds it: poll, as a standby does
            if lease is not None:
                break
            await asyncio.sleep(0.005)
            lease = await lease_store.acquire("memory:group-1", f"writer-{n}", ttl_s=30)
        assert lease is not None
        try:
            await store.write(name, await store.read(name) + f"- fact {n}\n")
        finally:
            await lease_store.release(lease)

    await at_the_same_moment(WRITERS, add)
    assert sorted((await stores[0].read(name)).splitlines()) == sorted(f"- fact {n}" for n in range(WRITERS))


async def test_32_updates_from_two_instances_at_once_lose_nothing_and_keep_one_backup_generation(
    two_instances: tuple[Database, Database],
) -> None:
    """No lease: `MemoryStore.update` alone serialises the read-modify-writes of every instance (a file not written
    yet included: it has no row to lock)."""
    writers = [MemoryWriter(PostgresMemoryStore(db)) for db in two_instances]
    name = MemoryName.chat_memory(session_key("default", "wecom", "group-1"))

    async def add(n: int) -> str:
        return await writers[n % 2].update(name, lambda text: text + f"- fact {n}\n", keep_backup=True)

    await at_the_same_moment(WRITERS, add)
    store = PostgresMemoryStore(two_instances[1])
    text, backup = await store.read(name), await store.read(name.backup_name())
    assert sorted(text.splitlines()) == sorted(f"- fact {n}" for n in range(WRITERS))
    assert text.startswith(backup) and len(backup.splitlines()) == WRITERS - 1  # the generation before the last


async def test_32_accepts_at_once_from_two_instances_are_all_listed_in_seq_order_by_source(
    two_instances: tuple[Database, Database],
) -> None:
    inboxes = [PostgresInbox(db) for db in two_instances]
    entries = await at_the_same_moment(
        WRITERS, lambda n: inboxes[n % 2].accept(f"wecom:app-{n % 2}", {"n": n, "text": "消息\u0000😀"})
    )
    listed = await inboxes[0].unsettled()
    assert sorted(e.id for e in listed) == sorted(e.id for e in entries)
    assert [e.seq for e in listed] == sorted(e.seq for e in entries) and inboxes[0].depth() == WRITERS
    assert all(e.payload["text"] == "消息\u0000😀" for e in listed)
    only_app_1 = await inboxes[1].unsettled("wecom:app-1")
    assert sorted(e.payload["n"] for e in only_app_1) == list(range(1, WRITERS, 2))
    assert await inboxes[1].unsettled("wecom:app_") == []  # a prefix, not a pattern
    await inboxes[1].settle(entries[0].id)
    assert await inboxes[0].count() == WRITERS - 1


async def test_32_sends_to_one_member_at_once_from_two_instances_count_no_more_than_the_window_allows(
    two_instances: tuple[Database, Database],
) -> None:
    windows = ((60.0, 5), (3600.0, 8))
    a, b = (PostgresMemberSends(db, "wecom/app-hr", windows) for db in two_instances)
    waits = await at_the_same_moment(WRITERS, lambda n: (a if n % 2 else b).take("zhangsan"))
    assert sorted(waits)[:5] == [0.0] * 5 and all(0 < w <= 60 for w in sorted(waits)[5:])  # five counted, no more
    assert (await b.waits("zhangsan", 4))[0] > 0 and (await a.waits("lisi", 6)) == [0.0] * 5 + [60.0]
    other_app = PostgresMemberSends(two_instances[0], "wecom/app-it", windows)
    assert await other_app.take("zhangsan") == 0.0  # another app's counts are its own


async def test_a_token_created_on_one_instance_is_known_to_the_other_until_revoked(
    two_instances: tuple[Database, Database],
) -> None:
    a, b = PostgresTokens(two_instances[0]), PostgresTokens(two_instances[1], ["from-config"])
    assert not await a.has_tokens() and await b.has_tokens()
    token = await a.create("console")
    assert token.startswith(TOKEN_PREFIX) and await b.identify(token) == "console"
    assert await b.identify("from-config") == "config-1" and await a.identify("from-config") is None
    with pytest.raises(ValueError, match="already exists"):
        await b.create("console")
    with pytest.raises(ValueError, match="reserved"):
        await b.create("config-2")
    assert [t.name for t in await b.stored()] == ["console"] and token not in repr(await b.stored())
    assert await b.revoke("console") is True and await a.identify(token) is None
    assert await b.revoke("console") is False


async def test_the_server_going_away_gives_fixed_storage_errors_then_everything_resumes(
    own_postgres_server: PostgresServer,
) -> None:
    dsn = own_postgres_server.dsn()
    database = await open_database(dsn, checkout_timeout_s=1.0)
    memory, inbox = PostgresMemoryStore(database), PostgresInbox(database)
    leases, seen, tokens = PostgresLeases(database), PostgresSeenIds(database, "d", ttl_s=60), PostgresTokens(database)
    name = MemoryName.agent_memory("default")
    try:
        await memory.write(name, "before")
        own_postgres_server.stop()
        calls: list[Awaitable[Any]] = [
            memory.write(name, "lost"),
            memory.read(name),
            inbox.accept("http", {"n": 1}),
            inbox.unsettled(),
            leases.acquire("l3", "a", ttl_s=15),
            seen.check_and_add("m1"),
            tokens.identify("ahk_x"),
        ]
        for call in calls:
            with pytest.raises(StorageError) as caught:
                await call
            text = str(caught.value)
            assert text.startswith("could not ") and text.endswith(": the database is unavailable")
            assert caught.value.__cause__ is None and str(own_postgres_server.port) not in text
        dedup = MessageDedup(seen, channel="wecom", cred_id="app-1")
        assert await dedup.is_duplicate("m2") is False  # fails open: a possible duplicate beats a certain loss
        own_postgres_server.start()
        await until_it_works(lambda: memory.write(name, "after"))
        assert await memory.read(name) == "after"
        assert (await inbox.accept("http", {"n": 2})).payload == {"n": 2}
        assert await leases.acquire("l3", "a", ttl_s=15) is not None
        assert await seen.check_and_add("m1") is False
    finally:
        await database.close()


async def test_a_pool_closed_by_a_close_cut_short_reopens_on_next_use_and_readyz_goes_503_then_200(
    own_postgres_server: PostgresServer, gateway: GatewayCore
) -> None:
    database = await open_database(own_postgres_server.dsn(), checkout_timeout_s=1.0)
    memory = PostgresMemoryStore(database)
    stores = PostgresStores(database, gateway.settings.data_dir)
    server = web_server(
        gateway.settings.model_copy(update={"http": gateway.settings.http.model_copy(update={"port": 0})}),
        gateway,
        stores,
    )
    await server.start()
    server.ready = True
    readyz = f"http://127.0.0.1:{server.port}/readyz"
    try:
        async with aiohttp.ClientSession() as client:
            assert await _status(client, readyz) == 200
            own_postgres_server.stop()
            closing = asyncio.create_task(database.close())  # a failing path closes the pool and is cut short
            await asyncio.sleep(0)
            closing.cancel()
            await asyncio.wait([closing])
            assert await _status(client, readyz) == 503
            own_postgres_server.start()
            deadline = time.monotonic() + RECOVERY_DEADLINE_S
            while await _status(client, readyz) != 200:
                assert time.monotonic() < deadline, "the database never came back: its pool stayed closed"
                await asyncio.sleep(0.1)
        await memory.write(MemoryName.agent_memory("default"), "after")
        assert await memory.read(MemoryName.agent_memory("default")) == "after"
    finally:
        await server.close()
        await database.close()


async def _status(client: aiohttp.ClientSession, url: str) -> int:
    async with client.get(url) as resp:
        return resp.status


async def test_lease_expiry_is_judged_by_the_database_s_clock_not_the_instances(
    two_instances: tuple[Database, Database],
) -> None:
    early, late = ManualClock(1_700_000_000.0), ManualClock(1_700_000_000.0 + 3600)  # clocks an hour apart
    a, b = PostgresLeases(two_instances[0], clock=early), PostgresLeases(two_instances[1], clock=late)
    held = await a.acquire("l3", "a", ttl_s=15)
    assert held is not None and held.expires_at == early() + 15  # on a's own clock, counted from before the call
    assert await b.acquire("l3", "b", ttl_s=15) is None  # b's clock says an hour later: the database says 0 s
    assert await a.renew(held, ttl_s=15) is not None
