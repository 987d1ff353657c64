"""The usage stores: reservations checked and taken atomically (also from several instances' pools), released,
lapsing after their lifetime; warnings once per period; day roll-ups summed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agenthub.storage.ports import UsageStore
from agenthub.storage.postgres import open_database
from agenthub.storage.postgres.usage import PostgresUsageStore
from agenthub.storage.usage import Claim, Forgotten, Scope, UsageRow, forgotten_tag
from agenthub.storage.usage_files import FileUsageStore
from tests.support.gated_pool import GatedPool
from tests.support.typecheck import mypy_says

DAY = "2026-12-03"
ALICE = Scope("user", "wecom", "alice")


def row(tokens: int, day: str = DAY, sender: str = "alice") -> UsageRow:
    return UsageRow(day, "turn", "default", "wecom", "g1", sender, "m", input=tokens)


async def admitted(stores: list[UsageStore], asks: int, limit: int, tokens: int) -> list[str]:
    claims = [Claim(ALICE, day_limit=limit)]
    answers = await asyncio.gather(*(stores[n % len(stores)].reserve(claims, DAY, tokens, 60.0) for n in range(asks)))
    return [a.id for a in answers if a.id is not None]


async def check_contract(stores: list[UsageStore]) -> None:
    store = stores[0]
    await store.add([row(300), row(200, day="2026-12-01"), row(999, sender="bob")])
    ids = await admitted(stores, 60, 1000, 100)
    assert len(ids) == 7  # 300 used: 300, 400 … 900 admitted, then 1000 reaches the limit
    refused = await store.reserve([Claim(ALICE, day_limit=1000)], DAY, 100, 60.0)
    assert refused.id is None and refused.refused is not None
    assert (refused.refused.period, refused.refused.used, refused.refused.limit) == ("day", 1000, 1000)
    month = await store.reserve([Claim(ALICE, month_limit=1201)], DAY, 100, 60.0)  # 500 used + 700 reserved
    assert month.id is not None
    for rid in [*ids, month.id]:
        await store.release(rid)
    assert (await store.reserve([Claim(ALICE, day_limit=301)], DAY, 100, 60.0)).id is not None
    lapsing = await store.reserve([Claim(Scope("chat", "wecom", "g9"), day_limit=100)], DAY, 100, 0.2)
    assert lapsing.id is not None
    assert (await store.reserve([Claim(Scope("chat", "wecom", "g9"), day_limit=100)], DAY, 100, 60.0)).id is None
    await asyncio.sleep(0.4)  # an instance that died: its reservation lapses
    assert (await store.reserve([Claim(Scope("chat", "wecom", "g9"), day_limit=100)], DAY, 100, 60.0)).id is not None
    assert [await s.first_warning(ALICE.key, DAY) for s in stores] == [True] + [False] * (len(stores) - 1)
    assert await store.first_warning(ALICE.key, "2026-12-04")
    days = await stores[-1].days("2026-12-01", "2026-12-31")
    assert sorted((r.day, r.sender_id, r.tokens) for r in days) == [
        ("2026-12-01", "alice", 200),
        (DAY, "alice", 300),
        (DAY, "bob", 999),
    ]


async def test_files_store(tmp_path: Path) -> None:
    await check_contract([FileUsageStore(tmp_path)])


async def test_postgres_store_shared_by_three_instances(postgres_dsn: str) -> None:
    databases = [await open_database(postgres_dsn) for _ in range(3)]
    try:
        await check_contract([PostgresUsageStore(db) for db in databases])
    finally:
        for db in databases:
            await db.close()


async def test_postgres_checks_wait_for_each_other_per_scope(postgres_dsn: str) -> None:
    """While one check holds a scope's lock, the others wait for it instead of all reading the same usage: 60
    checks released together still admit exactly what fits."""
    databases = [await open_database(postgres_dsn) for _ in range(3)]
    stores: list[UsageStore] = [PostgresUsageStore(db) for db in databases]
    try:
        await stores[0].add([row(300)])
        async with databases[0].connection("hold the scope") as holder, holder.transaction():
            await holder.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("budget:" + ALICE.key,))
            asking = asyncio.create_task(admitted(stores, 60, 1000, 100))
            await asyncio.sleep(0.5)
            assert not asking.done()  # every check waits for the scope
        assert len(await asking) == 7
    finally:
        for db in databases:
            await db.close()


async def test_postgres_forget_leaves_no_warning_mark_naming_the_person(postgres_dsn: str) -> None:
    db = await open_database(postgres_dsn)
    try:
        store = PostgresUsageStore(db)
        await store.add([row(100)])
        assert await store.first_warning(ALICE.key, DAY)
        assert await store.first_warning(Scope("user", "wecom", "bob").key, DAY)
        await store.forget(Forgotten("wecom", "alice", forgotten_tag("wecom", "alice"), ("default",), None))
        async with db.connection("test") as conn:
            cursor = await conn.execute("SELECT scope FROM usage_warnings")
            scopes = [r[0] for r in await cursor.fetchall()]
        assert scopes == ["user:wecom:bob"]
    finally:
        await db.close()


async def test_a_cancelled_add_still_counts_the_rows_it_wrote(tmp_path: Path) -> None:
    """An add whose caller is cancelled while its journal append runs (a forget's flush of a dead spool's rows):
    the rows land on disk, so the budget checks count them too (before: on disk, never counted until a restart, so a
    person could spend them again), and the write lock is held to the append's end."""
    store = FileUsageStore(tmp_path)
    await store.add([row(100)])  # the day loaded: the add below goes straight to its append
    loop = asyncio.get_running_loop()
    pool = GatedPool(loop, lambda fn, _: getattr(fn, "__name__", "") == "_append")
    loop.set_default_executor(pool)
    adding = asyncio.create_task(store.add([row(900)]))
    await asyncio.wait_for(pool.started.wait(), 2)
    adding.cancel()
    await asyncio.wait([adding], timeout=0.2)
    pool.gate.set()
    await asyncio.wait([adding])
    ended_before_its_append = not pool.finished.is_set()
    await asyncio.to_thread(pool.finished.wait, 2)
    assert adding.cancelled()
    assert (await store.reserve([Claim(ALICE, day_limit=1000)], DAY, 1, 60.0)).refused is not None  # 1,000 used
    assert (await FileUsageStore(tmp_path).reserve([Claim(ALICE, day_limit=1000)], DAY, 1, 60.0)).refused is not None
    assert not ended_before_its_append


async def test_a_cancelled_naming_keeps_the_lock_so_a_forget_after_it_drops_the_name(tmp_path: Path) -> None:
    """A naming whose caller is cancelled while `names.json` is written (the recorder's flush cancelled at
    shutdown) holds the write lock to the write's end: a forget of that sender waits for it and then drops the name
    (before: the forget ran meanwhile, and the naming's thread wrote the forgotten person's name back after it)."""
    store = FileUsageStore(tmp_path)
    loop = asyncio.get_running_loop()
    pool = GatedPool(loop, lambda fn, _: getattr(fn, "__name__", "") == "_write_names")
    loop.set_default_executor(pool)
    naming = asyncio.create_task(store.name_senders({("wecom", "bob"): "Bob Li"}))
    await asyncio.wait_for(pool.started.wait(), 2)
    naming.cancel()
    await asyncio.wait([naming], timeout=0.2)
    forgetting = asyncio.create_task(store.forget(Forgotten("wecom", "bob", forgotten_tag("wecom", "bob"), ("a",))))
    await asyncio.wait([forgetting], timeout=0.2)
    forgot_while_named = forgetting.done()
    pool.gate.set()
    await asyncio.wait([naming, forgetting])
    assert naming.cancelled()
    assert not forgot_while_named
    assert await FileUsageStore(tmp_path).sender_names([("wecom", "bob")]) == {}


async def test_a_cancelled_recovery_check_keeps_the_lock_to_its_reads_end(tmp_path: Path) -> None:
    """`unrecorded` cancelled while its thread reads the journals holds the write lock until that read ends: no
    append runs under a read (it could read a line half written) after its caller gave up."""
    store = FileUsageStore(tmp_path)
    await store.add([row(100)])
    loop = asyncio.get_running_loop()
    pool = GatedPool(loop, lambda fn, _: getattr(fn, "__name__", "") == "_unrecorded")
    loop.set_default_executor(pool)
    checking = asyncio.create_task(store.unrecorded([row(100), row(900)]))
    await asyncio.wait_for(pool.started.wait(), 2)
    checking.cancel()
    await asyncio.wait([checking], timeout=0.2)
    adding = asyncio.create_task(store.add([row(900)]))
    await asyncio.wait([adding], timeout=0.2)
    appended_under_the_read = adding.done()
    pool.gate.set()
    await asyncio.wait([checking, adding])
    assert checking.cancelled()
    assert not appended_under_the_read
    assert (await store.reserve([Claim(ALICE, day_limit=1000)], DAY, 1, 60.0)).refused is not None  # 1,000 used


def test_the_files_backend_is_still_importable_from_where_it_was_first() -> None:
    from agenthub.storage import usage, usage_files

    assert usage.FileUsageStore is usage_files.FileUsageStore
    with pytest.raises(AttributeError):
        getattr(usage, "NoSuchName")  # noqa: B009


def test_a_misspelled_name_from_the_usage_module_is_still_a_type_error(tmp_path: Path) -> None:
    """`FileUsageStore` reached through the module's `__getattr__` must not make every other name of the module
    `Any` to mypy: `UsageRwo` or `usage.jugde` would pass the type check and fail only when run."""
    out = mypy_says(
        tmp_path,
        "from agenthub.storage import usage\n"
        "from agenthub.storage.usage import FileUsageStore, UsageRwo\n"
        "usage.jugde\n"
        "reveal_type(FileUsageStore)\n",
    )
    assert 'Module "agenthub.storage.usage" has no attribute "UsageRwo"' in out, out
    assert 'Module has no attribute "jugde"' in out, out
    assert "agenthub.storage.usage_files.FileUsageStore" in out, out  # the real class, not Any
