"""A usage row waiting in memory survives `kill -9`: the spool hands it to the next start, which stores it once."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from zoneinfo import ZoneInfo

import psycopg
import pytest

from agenthub.clock import system_clock
from agenthub.config import Settings
from agenthub.hosting.app import open_stores
from agenthub.storage.usage import UsageRow
from agenthub.usage.periods import day_of
from agenthub.usage.recorder import UsageRecorder
from agenthub.usage.spool import UsageSpool
from tests.support.budgets import store_of
from tests.support.daemons import Deployment
from tests.support.fakes.anthropic import FakeAnthropic, reply_text

ZONE = ZoneInfo("Asia/Shanghai")
USAGE = {"input_tokens": 1234, "output_tokens": 56, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
BOUND_S = 60.0
"""A bound on a (re)started process storing a row under a loaded machine, not a measurement."""


def _rows_of(journal: Path, chat_id: str) -> list[dict[str, object]]:
    if not journal.is_file():
        return []
    rows = [json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in rows if r["chat_id"] == chat_id]


async def _until(check: object, bound_s: float = BOUND_S) -> None:
    deadline = time.monotonic() + bound_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "not within the bound"
        await asyncio.sleep(0.05)


async def test_a_row_not_stored_when_the_daemon_is_killed_is_stored_once_after_the_restart(
    tmp_path: Path, fake_llm: FakeAnthropic
) -> None:
    """The day's journal cannot be appended to (a directory stands in its place), so the turn's row waits in the
    recorder; `kill -9`; the journal is writable again; the restarted daemon stores the row, exactly once."""
    async with Deployment(tmp_path, fake_llm, count=1) as d:
        await d.start_all()  # a warm-up turn: its row is the journal's first line
        instance = d.instances[0]
        data = instance.root / "data"
        journal = data / "usage" / day_of(time.time(), ZONE)[:7] / f"{day_of(time.time(), ZONE)}.jsonl"
        await _until(journal.is_file)
        aside = journal.with_suffix(".aside")
        journal.rename(aside)
        journal.mkdir()  # appending now fails: the rows stay pending (retried every 5 s)
        fake_llm.script(reply_text("noted", usage=USAGE))
        status, _ = await d.client().chat("crash-chat", "remember this")
        assert status == 200
        spool = data / "usage-spool"
        await _until(lambda: any("crash-chat" in p.read_text() for p in spool.glob("*.jsonl")))
        await d.kill(0)
        journal.rmdir()
        aside.rename(journal)
        assert _rows_of(journal, "crash-chat") == []  # it was lost to memory: only the spool has it
        await d.restart(0, warm=False)
        await _until(lambda: len(_rows_of(journal, "crash-chat")) == 1)
        await _until(lambda: list(spool.glob("*.jsonl")) == [p for p in spool.glob("*.jsonl") if _own(p, d)])
        assert await d.stop_all() == [0]
    rows = _rows_of(journal, "crash-chat")
    assert len(rows) == 1
    assert (rows[0]["input"], rows[0]["output"]) == (1234, 56)
    assert list(spool.glob("*.jsonl")) == []  # a clean stop with nothing waiting leaves no spool


def _own(path: Path, d: Deployment) -> bool:
    process = d.instances[0].process
    return process is not None and path.name.startswith(f"{process.pid}-")


def _row(n: int) -> UsageRow:
    return UsageRow("2026-12-03", "turn", "default", "http", "c1", "alice", "m", n, 1, 0, 0, at=1.5e9 + n)


@pytest.mark.parametrize("backend", ["files", "postgres"])
async def test_a_spool_row_the_store_already_has_is_not_written_again(
    backend: str, settings_factory: Callable[..., Settings], request: pytest.FixtureRequest
) -> None:
    """Killed between the store's write and the spool's note: the recovered rows the store has are skipped."""
    settings = settings_factory(store=store_of(backend, request))
    stores = await open_stores(settings)
    try:
        store = stores.usage
        await store.add([_row(1), _row(2)])
        root = settings.data_dir / "usage-spool"
        dead = root / f"{os.getpid() + 1}-dead.jsonl"
        root.mkdir(parents=True)
        lines = [json.dumps(asdict(_row(n))) for n in range(4)]
        torn = '{"day": "2026-'
        dead.write_text("\n".join([lines[0], '{"stored": 1}', *lines[1:], torn]))
        recorder = UsageRecorder(store, ZONE, system_clock, UsageSpool(root))
        assert recorder.recover() == 3  # row 0 was noted as stored; the torn line is skipped
        await recorder.aclose()
        days = await store.days("2026-12-03", "2026-12-03")
    finally:
        await stores.aclose()
    assert (sum(r.calls for r in days), sum(r.input for r in days)) == (3, 1 + 2 + 3)  # row 3 added, 1 and 2 once
    assert list(root.iterdir()) == []


async def _calls_of(dsn: str, chat_id: str) -> list[tuple[int, int]]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cursor = await conn.execute("SELECT input, output FROM usage_calls WHERE chat_id = %s", (chat_id,))
        return [(int(r[0]), int(r[1])) for r in await cursor.fetchall()]


async def test_on_postgres_a_row_not_stored_when_the_daemon_is_killed_is_stored_once_after_the_restart(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """Another session holds `usage_calls` locked, so the turn's usage write waits (uncommitted) while the reply
    goes out; `kill -9`; the lock goes; the restarted daemon stores the row from the dead one's spool, once."""
    async with Deployment(tmp_path, fake_llm, count=1, dsn=postgres_dsn) as d:
        await d.start_all()
        data = d.instances[0].root / "data"
        spool = data / "usage-spool"
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as blocker:
            await blocker.execute("LOCK TABLE usage_calls IN ACCESS EXCLUSIVE MODE")  # held until the rollback
            fake_llm.script(reply_text("noted", usage=USAGE))
            status, _ = await d.client().chat("crash-chat", "remember this")
            assert status == 200
            await _until(lambda: any("crash-chat" in p.read_text() for p in spool.glob("*.jsonl")))
            await d.kill(0)
            await blocker.rollback()
        assert await _calls_of(postgres_dsn, "crash-chat") == []  # the killed daemon's write never committed
        await d.restart(0, warm=False)
        deadline = time.monotonic() + BOUND_S
        while not await _calls_of(postgres_dsn, "crash-chat"):
            assert time.monotonic() < deadline, "not within the bound"
            await asyncio.sleep(0.05)
        assert await d.stop_all() == [0]
    assert await _calls_of(postgres_dsn, "crash-chat") == [(1234, 56)]
    assert list(spool.glob("*.jsonl")) == []
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:  # counted once there too
        cursor = await conn.execute("SELECT tokens FROM usage_totals WHERE scope LIKE 'chat:%:crash-chat'")
        assert [int(r[0]) for r in await cursor.fetchall()] == [sum(USAGE.values())] * 2  # its day and its month
