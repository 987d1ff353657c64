"""The memory files a turn reads on PostgreSQL come from the instance's copy while the database's memory version,
learnt by a statement the turn sends anyway (its history append), is the one the copy was read at; a write by any
instance (or by hand, in SQL) committed before the turn began is read by it."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio

from agenthub.session_keys import session_key
from agenthub.storage.memory_files import MemoryName
from agenthub.storage.postgres.backend import PostgresStores
from agenthub.storage.postgres.database import open_database

KEY = session_key("default", "http", "alice")
MEMORY = MemoryName.agent_memory("default")
PROFILE = MemoryName.person_profile("default", KEY, "alice", "private")
NAMES = [MEMORY, PROFILE]


def _msg(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": 1}


@pytest_asyncio.fixture
async def two(postgres_dsn: str, tmp_path: Path) -> AsyncIterator[tuple[PostgresStores, PostgresStores]]:
    """Two instances of one deployment: a pool and stores each."""
    first = PostgresStores(await open_database(postgres_dsn), tmp_path / "a")
    second = PostgresStores(await open_database(postgres_dsn), tmp_path / "b")
    try:
        yield first, second
    finally:
        await first.aclose()
        await second.aclose()


async def _turn(stores: PostgresStores, text: str = "hi") -> list[str]:
    """What a turn does: it begins, stores the user's message, then reads its memory blocks."""
    began = time.monotonic()
    await stores.sessions.append(KEY, [_msg(text)])
    return await stores.memory.read_many(NAMES, fresh_since=began)


async def test_turns_with_nothing_written_read_the_memory_files_once(
    two: tuple[PostgresStores, PostgresStores],
) -> None:
    a, _ = two
    await a.memory.write(MEMORY, "- likes tea\n")
    assert await _turn(a) == ["- likes tea\n", ""]
    trips = a.database.latency.count
    for _ in range(3):
        assert await _turn(a) == ["- likes tea\n", ""]
    assert a.database.latency.count == trips + 3  # the appends, and nothing else


async def test_a_write_on_another_instance_just_before_a_turn_is_read_by_that_turn(
    two: tuple[PostgresStores, PostgresStores],
) -> None:
    a, b = two
    await a.memory.write(MEMORY, "old")
    assert await _turn(a) == ["old", ""]
    await b.memory.write(PROFILE, "- prefers 中文\n")
    assert await _turn(a) == ["old", "- prefers 中文\n"]
    await b.memory.update(MEMORY, lambda text: text + " and new")
    assert await _turn(a) == ["old and new", "- prefers 中文\n"]
    assert await b.memory.delete(PROFILE)
    assert await _turn(a) == ["old and new", ""]


async def test_a_write_by_hand_in_sql_is_read_by_the_next_turn(two: tuple[PostgresStores, PostgresStores]) -> None:
    a, b = two
    await a.memory.write(MEMORY, "old")
    assert await _turn(a) == ["old", ""]
    async with b.database.connection("edit by hand") as conn:
        await conn.execute("UPDATE memory_files SET body = convert_to('edited', 'UTF8')")
    assert await _turn(a) == ["edited", ""]


async def test_without_a_statement_sent_since_the_turn_began_the_files_are_read_from_the_database(
    two: tuple[PostgresStores, PostgresStores],
) -> None:
    a, b = two
    await a.memory.write(MEMORY, "old")
    assert await _turn(a) == ["old", ""]
    await b.memory.write(MEMORY, "new")
    assert await a.memory.read_many(NAMES, fresh_since=time.monotonic()) == ["new", ""]
    assert await a.memory.read_many(NAMES) == ["new", ""]


async def test_an_own_write_during_a_turn_is_read_back_by_that_turn(
    two: tuple[PostgresStores, PostgresStores],
) -> None:
    a, _ = two
    await a.memory.write(MEMORY, "old")
    began = time.monotonic()
    await a.sessions.append(KEY, [_msg("remember this")])
    assert await a.memory.read_many(NAMES, fresh_since=began) == ["old", ""]
    await a.memory.update(MEMORY, lambda text: text + " + this")  # the model's memory tool, in the same turn
    await a.memory.write(PROFILE, "p")
    assert await a.memory.read_many(NAMES, fresh_since=began) == ["old + this", "p"]
