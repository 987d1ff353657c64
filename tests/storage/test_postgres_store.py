"""`PostgresSessionStore` against a real PostgreSQL: order, all-or-nothing, archive, clear, delete, meta, activity,
many writers at once, migrations, and a server that goes away and comes back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
import pytest_asyncio

from agenthub.errors import StorageError
from agenthub.session_keys import SessionKey, session_key
from agenthub.storage.meta import SessionMeta
from agenthub.storage.ports import SessionStore
from agenthub.storage.postgres import SCHEMA_VERSION, PostgresSessionStore, apply_migrations, postgres_store_factory
from agenthub.storage.postgres.database import migrate
from agenthub.storage.postgres.schema import MIGRATIONS, SchemaTooNewError
from agenthub.storage.store import MalformedRecordError
from tests.support.postgres import PostgresServer, free_port, refusing_large_writes, until_it_works

KEY = session_key("default", "http", "alice")
MEETS_THE_PROTOCOL: type[SessionStore] = PostgresSessionStore  # checked by mypy
PAD = "页" * 3000  # 9 KB: over what `refusing_large_writes` lets through


def msg(text: str, role: str = "user", **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": text, **extra}


@pytest_asyncio.fixture
async def store(postgres_dsn: str) -> AsyncIterator[PostgresSessionStore]:
    opened = await postgres_store_factory(postgres_dsn)
    try:
        yield opened
    finally:
        await opened.close()


async def test_an_unknown_session_is_empty(store: PostgresSessionStore) -> None:
    assert await store.load(KEY) == []
    assert await store.read_archive(KEY) == []
    assert await store.read_meta(KEY) is None
    assert not await store.exists(KEY)
    assert await store.list_keys("default") == []
    assert await store.activity("default") == []
    assert not await store.delete(KEY)


async def test_appends_come_back_in_order_exactly_as_written(store: PostgresSessionStore) -> None:
    odd = msg("空字符\u0000 and a lone \ud800 and 中文", timestamp=1, z_first="kept", a_last=[1, 2.5, None])
    blocks = {"role": "assistant", "content": [{"type": "text", "text": "hi"}, {"type": "tool_use", "id": "t"}]}
    await store.append(KEY, [msg("one")])
    await store.append(KEY, [blocks, odd])
    await store.append(KEY, [msg("four", "assistant")])
    loaded = await store.load(KEY)
    assert loaded == [msg("one"), blocks, odd, msg("four", "assistant")]
    assert list(loaded[2]) == list(odd)  # key order too
    assert await store.exists(KEY)


async def test_a_refused_record_stores_nothing_of_its_call(store: PostgresSessionStore) -> None:
    await store.append(KEY, [msg("kept")])
    with pytest.raises(MalformedRecordError):
        await store.append(KEY, [msg("not stored"), {"role": "tool", "content": "x"}])
    with pytest.raises(MalformedRecordError):
        await store.append(KEY, [msg("not stored"), msg("nan", score=float("nan"))])
    assert await store.load(KEY) == [msg("kept")]


async def test_a_server_side_failure_in_mid_append_stores_nothing(
    store: PostgresSessionStore, postgres_dsn: str
) -> None:
    await store.append(KEY, [msg("kept")])
    with refusing_large_writes(postgres_dsn), pytest.raises(StorageError) as caught:
        await store.append(KEY, [msg("a"), msg("b"), msg(PAD), msg("c")])
    assert "too large" not in str(caught.value) and caught.value.__cause__ is None
    await store.append(KEY, [msg("after")])
    assert await store.load(KEY) == [msg("kept"), msg("after")]


async def test_replace_archives_then_replaces_in_one_transaction(
    store: PostgresSessionStore, postgres_dsn: str
) -> None:
    await store.append(KEY, [msg(str(i)) for i in range(5)])
    await store.replace(KEY, [msg("summary", "system"), msg("4")], archive=[msg("0"), msg("1"), msg("2"), msg("3")])
    await store.append(KEY, [msg("5")])
    assert await store.load(KEY) == [msg("summary", "system"), msg("4"), msg("5")]
    await store.replace(KEY, [msg("5")], archive=[msg("summary", "system"), msg("4")])
    assert await store.read_archive(KEY) == [msg(str(i)) for i in range(4)] + [msg("summary", "system"), msg("4")]
    with refusing_large_writes(postgres_dsn), pytest.raises(StorageError):
        await store.replace(KEY, [msg("6"), msg(PAD)], archive=[msg("5")])
    assert await store.load(KEY) == [msg("5")]
    assert len(await store.read_archive(KEY)) == 6  # the archive step was rolled back with the rest


async def test_replace_with_nothing_leaves_an_empty_history(store: PostgresSessionStore) -> None:
    await store.append(KEY, [msg("old")])
    await store.replace(KEY, [], archive=[msg("old")])
    assert await store.load(KEY) == [] and await store.exists(KEY)
    assert [a.key for a in await store.activity("default")] == [KEY]


async def test_rewrite_archive_replaces_it_whole(store: PostgresSessionStore) -> None:
    await store.append(KEY, [msg("a"), msg("b")])
    await store.replace(KEY, [], archive=[msg("a"), msg("b")])
    await store.rewrite_archive(KEY, [msg("[redacted]")])
    assert await store.read_archive(KEY) == [msg("[redacted]")]
    await store.rewrite_archive(KEY, [])
    assert await store.read_archive(KEY) == []


async def test_clear_archives_and_drops_the_history_but_keeps_the_meta(store: PostgresSessionStore) -> None:
    await store.write_meta(KEY, SessionMeta(chat_id="alice", title="kept"), durable=True)
    await store.append(KEY, [msg("a"), msg("b")])
    await store.clear(KEY, archive=[msg("a"), msg("b")])
    assert await store.load(KEY) == []
    assert await store.read_archive(KEY) == [msg("a"), msg("b")]
    meta = await store.read_meta(KEY)
    assert meta is not None and meta.title == "kept"
    assert await store.exists(KEY) and await store.activity("default") == []
    await store.append(KEY, [msg("again")])
    assert await store.load(KEY) == [msg("again")]


async def test_delete_removes_history_archive_and_meta(store: PostgresSessionStore) -> None:
    other = session_key("default", "http", "bob")
    for key in (KEY, other):
        await store.append(key, [msg("a"), msg("b")])
        await store.replace(key, [msg("b")], archive=[msg("a")])
        await store.write_meta(key, SessionMeta(chat_id=key.chat_id), durable=True)
    assert await store.delete(KEY)
    assert (await store.load(KEY), await store.read_archive(KEY), await store.read_meta(KEY)) == ([], [], None)
    assert not await store.exists(KEY) and not await store.delete(KEY)
    assert await store.load(other) == [msg("b")] and await store.read_archive(other) == [msg("a")]
    meta_only = session_key("default", "http", "carol")
    await store.write_meta(meta_only, SessionMeta(chat_id="carol"), durable=False)
    assert await store.delete(meta_only) and not await store.exists(meta_only)


async def test_meta_round_trips_and_catches_up_with_the_newest_record(store: PostgresSessionStore) -> None:
    meta = SessionMeta(chat_id="alice", title="标题", created_at=5, updated_at=10, pinned=True, last_usage={"input": 3})
    await store.write_meta(KEY, meta, durable=True)
    assert await store.read_meta(KEY) == meta
    await store.write_meta(KEY, meta.with_changes(title="behind"), durable=False)
    await store.append(KEY, [msg("new", timestamp=99)])
    assert await store.read_meta(KEY) == meta.with_changes(title="behind", updated_at=99)
    await store.append(KEY, [msg("no stamp")])
    assert (await store.read_meta(KEY) or meta).updated_at == 10  # like the files: the last record's stamp only


async def test_list_keys_and_activity_per_agent(store: PostgresSessionStore) -> None:
    first, second = session_key("default", "http", "b"), session_key("default", "wecom", "room:42")
    meta_only, elsewhere = session_key("default", "cli", "c"), session_key("reviewer", "http", "b")
    await store.append(first, [msg("1")])
    await store.append(second, [msg("2")])
    await store.write_meta(meta_only, SessionMeta(chat_id="c"), durable=True)
    await store.append(elsewhere, [msg("x")])
    await store.append(first, [msg("3")])
    assert await store.list_keys("default") == sorted([first, second, meta_only], key=lambda k: k.file_stem)
    activity = await store.activity("default")
    assert [a.key for a in activity] == [first, second]
    assert activity[0].changed_at >= activity[1].changed_at
    assert abs(activity[0].changed_at - time.time()) < 300  # epoch seconds, not ms or a monotonic clock
    assert [a.key for a in await store.activity("reviewer")] == [elsewhere]


async def test_32_writers_on_32_sessions_at_once_all_land(store: PostgresSessionStore) -> None:
    keys = [session_key("default", "http", f"user{i}") for i in range(32)]
    gate = asyncio.Event()

    async def writer(key: SessionKey) -> None:
        await gate.wait()
        await store.append(key, [msg(f"{key.chat_id} asks"), msg(f"{key.chat_id} answered", "assistant")])

    tasks = [asyncio.create_task(writer(key)) for key in keys]
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(*tasks)
    for key in keys:
        assert await store.load(key) == [msg(f"{key.chat_id} asks"), msg(f"{key.chat_id} answered", "assistant")]


async def test_32_writers_on_one_session_at_once_are_serialised(store: PostgresSessionStore) -> None:
    gate = asyncio.Event()

    async def writer(i: int) -> None:
        await gate.wait()
        await store.append(KEY, [msg(f"q{i}"), msg(f"a{i}", "assistant"), msg(f"n{i}")])

    tasks = [asyncio.create_task(writer(i)) for i in range(32)]
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(*tasks)
    loaded = [r["content"] for r in await store.load(KEY)]
    assert len(loaded) == 96
    calls = [loaded[i : i + 3] for i in range(0, 96, 3)]
    assert all(c == [f"q{c[0][1:]}", f"a{c[0][1:]}", f"n{c[0][1:]}"] for c in calls)  # never interleaved
    assert sorted(int(c[0][1:]) for c in calls) == list(range(32))


async def test_migrations_run_once_even_when_two_instances_start_together(postgres_dsn: str) -> None:
    versions = [m.version for m in MIGRATIONS]
    assert versions == sorted(set(versions)) and versions[-1] == SCHEMA_VERSION  # ascending, each once
    results = await asyncio.gather(*(migrate(postgres_dsn) for _ in range(4)))
    assert sorted(results) == [[], [], [], versions]
    assert await migrate(postgres_dsn) == []
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as conn:
        cursor = await conn.execute("SELECT version FROM schema_version ORDER BY version")
        assert [row[0] for row in await cursor.fetchall()] == versions


async def test_a_schema_newer_than_the_code_is_refused(postgres_dsn: str) -> None:
    await migrate(postgres_dsn)
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        await conn.execute("INSERT INTO schema_version (version, what) VALUES (%s, 'future')", (SCHEMA_VERSION + 1,))
        with pytest.raises(SchemaTooNewError, match="upgrade"):
            await apply_migrations(conn)


@pytest.mark.parametrize(
    ("dsn", "says"),
    [
        ("postgresql://agenthub:hunter2@127.0.0.1:{closed}/postgres", "cannot connect"),
        ("postgresql://agenthub:hunter2@127.0.0.1:{port}/no_such_db", "cannot connect"),
        ("postgresql://no_such_role:hunter2@127.0.0.1:{port}/postgres", "cannot connect"),
        ("host=127.0.0.1 port={port} password=hunter2 nonsense", "not a valid"),
    ],
)
async def test_start_up_failures_are_one_line_without_the_dsn(
    postgres_server: PostgresServer, dsn: str, says: str
) -> None:
    dsn = dsn.format(port=postgres_server.port, closed=free_port())
    with pytest.raises(StorageError) as caught:
        await postgres_store_factory(dsn)
    text = str(caught.value)
    assert says in text and "AGENTHUB_STORE__DSN" in text and "\n" not in text
    assert "hunter2" not in text and "127.0.0.1" not in text and caught.value.__cause__ is None


async def test_a_server_that_goes_away_gives_storage_errors_then_everything_resumes(
    own_postgres_server: PostgresServer,
) -> None:
    dsn = own_postgres_server.dsn()
    store = await postgres_store_factory(dsn, checkout_timeout_s=1.0)
    try:
        await store.append(KEY, [msg("before")])
        own_postgres_server.stop()
        for operation in (store.append(KEY, [msg("lost")]), store.load(KEY), store.read_meta(KEY)):
            with pytest.raises(StorageError) as caught:
                await operation
            text = str(caught.value)
            assert text.endswith("the database is unavailable") and caught.value.__cause__ is None
            assert dsn not in text and str(own_postgres_server.port) not in text
        own_postgres_server.start()
        await until_it_works(lambda: store.append(KEY, [msg("after")]))
        assert await store.load(KEY) == [msg("before"), msg("after")]
    finally:
        await store.close()


async def test_a_user_without_the_right_to_create_tables_is_told_so(postgres_dsn: str) -> None:
    role = f"weak_{postgres_dsn.rsplit('_', 1)[1]}"
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        await conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'hunter2'")
    weak_dsn = postgres_dsn.replace("agenthub@", f"{role}:hunter2@")
    try:
        with pytest.raises(StorageError, match="may not create AgentHub's tables") as caught:
            await postgres_store_factory(weak_dsn)
        assert "hunter2" not in str(caught.value) and role not in str(caught.value)
    finally:
        async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
            await conn.execute(f"DROP ROLE {role}")


async def test_the_first_call_after_a_quiet_server_restart_succeeds(own_postgres_server: PostgresServer) -> None:
    store = await postgres_store_factory(own_postgres_server.dsn(), max_size=4)
    try:
        await asyncio.gather(*(store.append(session_key("default", "http", f"u{i}"), [msg("warm")]) for i in range(4)))
        own_postgres_server.stop()  # nobody calls while it is away: every pooled connection is now dead
        own_postgres_server.start()
        for i in range(4):
            await store.append(session_key("default", "http", f"u{i}"), [msg("after")])
        assert await store.load(session_key("default", "http", "u3")) == [msg("warm"), msg("after")]
    finally:
        await store.close()


async def test_archive_writers_of_one_session_from_several_instances_never_collide(
    store: PostgresSessionStore,
) -> None:
    """Replaces, clears and archive rewrites of one session at the same moment (two instances, no shared
    in-process lock) all land: each numbers its archive rows under the session's lock, even with no head row."""
    key = session_key("default", "http", "contended")
    await store.append(key, [msg("start")])
    start = asyncio.Event()

    async def writer(n: int) -> None:
        await start.wait()
        if n % 3 == 0:
            await store.replace(key, [msg(f"kept {n}")], archive=[msg(f"dropped {n}")])
        elif n % 3 == 1:
            await store.clear(key, archive=[msg(f"cleared {n}")])
        else:
            await store.rewrite_archive(key, [msg(f"rewritten {n}")])

    tasks = [asyncio.create_task(writer(n)) for n in range(24)]
    await asyncio.sleep(0)
    start.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert [r for r in results if r is not None] == []
