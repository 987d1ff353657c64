"""On PostgreSQL a session's meta written behind (a turn's `last_usage`) under a held lease goes with the session's
next append, in the same statement: a busy session whose lease is never let go has it in the database, so `kill -9`
loses nothing (an idle one's goes with the lease's release, `lease_s / 3` after its last turn)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agenthub.session_keys import SessionKey
from agenthub.storage.meta import SessionMeta
from agenthub.storage.postgres.database import open_database
from agenthub.storage.postgres.sessions import PostgresSessionStore
from agenthub.storage.store import FencedWriteError
from tests.support.daemons import Deployment
from tests.support.fakes.anthropic import FakeAnthropic, reply_text

USAGE = {"input_tokens": 4321, "output_tokens": 65, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
BOUND_S = 60.0
"""A bound on the meta reaching the database under a loaded machine, not a measurement."""


def stored_meta(dsn: str, chat_id: str) -> dict[str, Any] | None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT meta::text FROM session_meta WHERE agent = 'default' AND chat_id = %s", (chat_id,)
        ).fetchone()
    return None if row is None else dict(json.loads(row[0]))


def stored_input_tokens(dsn: str, chat_id: str) -> object:
    return ((stored_meta(dsn, chat_id) or {}).get("last_usage") or {}).get("input_tokens")


async def until_stored(d: Deployment, usage: dict[str, int]) -> None:
    """Turns of chat `metered` using `usage`, one every half second, until its meta in the database says so."""
    assert d.dsn is not None
    deadline = time.monotonic() + BOUND_S
    while await asyncio.to_thread(stored_input_tokens, d.dsn, "metered") != usage["input_tokens"]:
        assert time.monotonic() < deadline, f"not in the database: {stored_meta(d.dsn, 'metered')}"
        d.llm.script(reply_text("counted", usage=usage))
        status, body = await d.client().chat("metered", "how much was that")
        assert status == 200, body
        await asyncio.sleep(0.5)


async def test_the_last_usage_of_a_busy_session_reaches_the_database_before_a_kill(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """Turns follow each other faster than the lease's idle release (`lease_s / 3`), so the lease is never let go:
    the meta written behind reaches the database with a later turn's append, and `kill -9` then loses nothing."""
    async with Deployment(tmp_path, fake_llm, count=1, dsn=postgres_dsn, lease_s=120.0) as d:
        await d.start_all()
        # the first claim finds the session new and lets it go after the turn (its meta written without a lease);
        # from the second on the lease stays, kept idle `lease_s / 3` between turns
        await until_stored(d, {**USAGE, "input_tokens": 1111})
        await until_stored(d, USAGE)  # a turn every half second: the lease is never let go
        await d.kill(0)  # the lease is still held: nothing more is written at its release
    meta = stored_meta(postgres_dsn, "metered")
    assert meta is not None and meta["last_usage"]["input_tokens"] == 4321


async def test_an_append_carries_the_meta_written_behind_under_a_held_lease(postgres_dsn: str) -> None:
    store = PostgresSessionStore(await open_database(postgres_dsn))
    key = SessionKey("default", "http", "carried")
    try:
        await store.fence(key, 1)
        await store.append(key, [{"role": "user", "content": "one", "timestamp": 1}])
        meta = SessionMeta.from_json(
            {"chat_id": "carried", "created_at": 1, "updated_at": 2, "last_usage": {"input_tokens": 7}}
        )
        await store.write_meta(key, meta, durable=False)  # held: written behind
        await store.append(key, [{"role": "assistant", "content": "two", "timestamp": 2}])
        assert (stored_meta(postgres_dsn, "carried") or {}).get("last_usage") == {"input_tokens": 7}
    finally:
        await store.close()


async def test_an_append_refused_by_a_newer_fence_writes_none_of_the_meta_it_carried(postgres_dsn: str) -> None:
    """Two instances interleaved: A holds the session (token 1) with a meta written behind; B takes it (token 2)
    and appends; A's late append is refused, and the meta it carried is not written over B's."""
    first = PostgresSessionStore(await open_database(postgres_dsn))
    second = PostgresSessionStore(await open_database(postgres_dsn))
    key = SessionKey("default", "http", "taken")
    try:
        await first.fence(key, 1)
        late = SessionMeta.from_json({"chat_id": "taken", "created_at": 1, "updated_at": 2, "last_usage": {"a": 1}})
        await first.write_meta(key, late, durable=False)
        await second.fence(key, 2)
        await second.append(key, [{"role": "user", "content": "mine now", "timestamp": 3}])
        with pytest.raises(FencedWriteError):
            await first.append(key, [{"role": "user", "content": "too late", "timestamp": 4}])
        assert stored_meta(postgres_dsn, "taken") is None
        assert [r["content"] for r in await second.load(key)] == ["mine now"]
    finally:
        await first.close()
        await second.close()
