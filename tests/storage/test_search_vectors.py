"""The `VectorStore` port on both backends: nearest by cosine within the scope, relabel, remove, drop, and a purge
that leaves no removed text in the files or the table."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import pytest_asyncio

from agenthub.search.embeddings import unit
from agenthub.storage.paths import AgentLayout
from agenthub.storage.ports import VectorStore
from agenthub.storage.postgres.database import open_database
from agenthub.storage.postgres.search_vectors import PostgresVectorStore
from agenthub.storage.search_index import ARCHIVE, HISTORY, Passage, SearchScope, SourceRef
from agenthub.storage.search_vectors import FileVectorStore, digest_of, vectors_path

AGENT = "a"
MODEL = "m1"


def _passage(session: str, seq: int, text: str, kind: str = HISTORY) -> Passage:
    return Passage(SourceRef(kind, session), seq, "user", "u1", 1_000 + seq, text)  # type: ignore[arg-type]


def _vec(*values: float) -> np.ndarray:
    return unit(values)


@pytest_asyncio.fixture(params=["files", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[VectorStore]:
    if request.param == "files":
        opened: VectorStore = FileVectorStore(tmp_path / "data")
    else:
        dsn = request.getfixturevalue("postgres_dsn")
        opened = PostgresVectorStore(await open_database(dsn))
    try:
        yield opened
    finally:
        await opened.close()
        if isinstance(opened, PostgresVectorStore):
            await opened.database.close()


async def test_nearest_ranks_by_cosine_within_the_scope_only(store: VectorStore) -> None:
    mine, theirs, other_channel = "a:http:c1", "a:http:c2", "a:wecom:g1"
    await store.put(
        AGENT,
        MODEL,
        [
            (_passage(mine, 0, "north"), _vec(1, 0, 0)),
            (_passage(mine, 1, "north-east"), _vec(1, 1, 0)),
            (_passage(mine, 2, "up"), _vec(0, 0, 1)),
            (_passage(theirs, 0, "their north"), _vec(1, 0, 0)),
            (_passage(other_channel, 0, "wecom north"), _vec(1, 0, 0)),
        ],
    )
    await store.put(AGENT, "other-model", [(_passage(mine, 3, "old model north"), _vec(1, 0, 0))])
    query = _vec(1, 0.1, 0)
    own = await store.nearest(AGENT, MODEL, query, SearchScope(mine), 2)
    assert [p.text for p, _ in own] == ["north", "north-east"]
    assert own[0][1] == pytest.approx(float(_vec(1, 0, 0) @ query), abs=1e-6)
    assert own[0][0] == _passage(mine, 0, "north")
    shared = await store.nearest(AGENT, MODEL, query, SearchScope(None, agent_scoped=lambda ch: ch == "http"), 10)
    assert sorted(p.text for p, _ in shared) == ["north", "north-east", "their north", "up"]
    assert await store.nearest("b", MODEL, query, SearchScope(None, agent_scoped=lambda ch: True), 10) == []


async def test_relabel_remove_and_drop(store: VectorStore) -> None:
    session = "a:http:c1"
    kept, gone = _passage(session, 0, "kept"), _passage(session, 1, "gone")
    await store.put(AGENT, MODEL, [(kept, _vec(1, 0)), (gone, _vec(0, 1))])
    await store.relabel(AGENT, session, {digest_of(kept): ARCHIVE})
    await store.remove(AGENT, session, [digest_of(gone)])
    stored = await store.stored(AGENT, session)
    assert {d: (s.kind, s.model) for d, s in stored.items()} == {digest_of(kept): (ARCHIVE, MODEL)}
    ((found, _),) = await store.nearest(AGENT, MODEL, _vec(1, 0), SearchScope(session), 5)
    assert found.kind == ARCHIVE and found.text == "kept"
    await store.drop_session(AGENT, session)
    assert await store.stored(AGENT, session) == {}


async def test_a_purge_leaves_no_removed_text_behind(store: VectorStore, tmp_path: Path) -> None:
    session = "a:http:c1"
    secret = _passage(session, 0, "my secret is ZEBRA-SECRET-77")
    await store.put(AGENT, MODEL, [(secret, _vec(1, 0)), (_passage(session, 1, "harmless"), _vec(0, 1))])
    await store.remove(AGENT, session, [digest_of(secret)])
    await store.purge(AGENT)
    assert [p.text for p, _ in await store.nearest(AGENT, MODEL, _vec(1, 0), SearchScope(session), 5)] == ["harmless"]
    if isinstance(store, FileVectorStore):
        directory = vectors_path(AgentLayout(tmp_path / "data", AGENT)).parent
        assert all(b"ZEBRA-SECRET" not in f.read_bytes() for f in directory.iterdir() if f.is_file())
    else:
        assert isinstance(store, PostgresVectorStore)
        async with store.database.connection("test") as conn:
            cursor = await conn.execute("SELECT count(*) FROM search_vectors WHERE text LIKE '%ZEBRA%'")
            assert (await cursor.fetchone()) == (0,)


async def test_what_is_stored_after_a_search_is_found_by_the_next(store: VectorStore) -> None:
    session = "a:http:c1"
    first, second = _passage(session, 0, "first"), _passage(session, 1, "second")
    await store.put(AGENT, MODEL, [(first, _vec(1, 0, 0))])
    assert [p.text for p, _ in await store.nearest(AGENT, MODEL, _vec(0, 1, 0), SearchScope(session), 5)] == ["first"]
    await store.put(AGENT, MODEL, [(second, _vec(0, 1, 0))])  # appended to what the last search read
    assert [p.text for p, _ in await store.nearest(AGENT, MODEL, _vec(0, 1, 0), SearchScope(session), 5)] == [
        "second",
        "first",
    ]
    await store.put(AGENT, MODEL, [(first, _vec(0, 1, 0.1))])  # the same passage embedded again
    found = await store.nearest(AGENT, MODEL, _vec(0, 0, 1), SearchScope(session), 5)
    assert [p.text for p, _ in found] == ["first", "second"]
    await store.remove(AGENT, session, [digest_of(first)])
    assert [p.text for p, _ in await store.nearest(AGENT, MODEL, _vec(0, 0, 1), SearchScope(session), 5)] == ["second"]


async def test_postgres_instances_keep_their_cached_vectors_level_with_each_other(postgres_dsn: str) -> None:
    one, two = (
        PostgresVectorStore(await open_database(postgres_dsn)),
        PostgresVectorStore(await open_database(postgres_dsn)),
    )
    session = "a:http:c1"
    first, second, third = _passage(session, 0, "first"), _passage(session, 1, "second"), _passage(session, 2, "third")
    try:
        await one.put(AGENT, MODEL, [(first, _vec(1, 0, 0)), (second, _vec(0, 1, 0))])
        assert [p.text for p, _ in await two.nearest(AGENT, MODEL, _vec(0, 1, 0), SearchScope(session), 1)] == [
            "second"
        ]
        assert two.reads == 2
        await one.put(AGENT, MODEL, [(third, _vec(0, 0, 1))])  # the other instance adds: read alone
        assert [p.text for p, _ in await two.nearest(AGENT, MODEL, _vec(0, 0, 1), SearchScope(session), 1)] == ["third"]
        assert two.reads == 3
        assert [p.text for p, _ in await two.nearest(AGENT, MODEL, _vec(0, 0, 1), SearchScope(session), 1)] == ["third"]
        assert two.reads == 3  # nothing changed: nothing read
        await one.put(AGENT, MODEL, [(first, _vec(0, 0.1, 1))])  # embedded again: the cache is read again whole
        found = await two.nearest(AGENT, MODEL, _vec(0, 0, 1), SearchScope(session), 3)
        assert [p.text for p, _ in found][:2] == ["third", "first"] and two.reads == 6
        await one.remove(AGENT, session, [digest_of(third)])  # removed by the other instance: never found again
        assert [p.text for p, _ in await two.nearest(AGENT, MODEL, _vec(0, 0, 1), SearchScope(session), 3)] == [
            "first",
            "second",
        ]
        await one.drop_session(AGENT, session)
        assert await two.nearest(AGENT, MODEL, _vec(0, 0, 1), SearchScope(session), 3) == []
    finally:
        for store in (one, two):
            await store.close()
            await store.database.close()


async def test_postgres_purge_vacuums_only_after_a_removal(postgres_dsn: str) -> None:
    store = PostgresVectorStore(await open_database(postgres_dsn))
    session = "a:http:c1"

    async def vacuums() -> int:
        async with store.database.connection("test") as conn:
            cursor = await conn.execute("SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'search_vectors'")
            row = await cursor.fetchone()
            return int(row[0]) if row else 0

    try:
        await store.put(AGENT, MODEL, [(_passage(session, 0, "kept"), _vec(1, 0))])
        await store.remove(AGENT, session, ["no-such-digest"])
        await store.purge(AGENT)
        await store.drop_session(AGENT, "a:http:none")
        await store.purge(AGENT)
        assert await vacuums() == 0  # nothing was removed: no VACUUM
        await store.remove(AGENT, session, [digest_of(_passage(session, 0, "kept"))])
        await asyncio.gather(store.purge(AGENT), store.purge(AGENT), store.purge(AGENT))
        await store.purge(AGENT)
        for _ in range(50):  # the statistics collector reports a little later
            if await vacuums() >= 1:
                break
            await asyncio.sleep(0.1)
        assert await vacuums() == 1  # one VACUUM for the removal, however many purges asked
    finally:
        await store.close()
        await store.database.close()
