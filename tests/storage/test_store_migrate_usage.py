"""`agenthub store migrate` copies the usage journal's days (a month's budget survives the move) and the idempotency
keys still inside their window; a second run copies nothing."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from agenthub.cli import main
from agenthub.storage.idempotency import FileIdempotency
from agenthub.storage.postgres import Database, open_database
from agenthub.storage.postgres.idempotency import PostgresIdempotency
from agenthub.storage.postgres.usage import PostgresUsageStore
from agenthub.storage.usage import Forgotten, UsageRow, forgotten_tag
from agenthub.storage.usage_files import FileUsageStore
from agenthub.usage.report import group
from tests.support.roots import dirs_in_env

MIGRATE = ["store", "migrate", "--from", "files", "--to", "postgres"]
WINDOW_S = 86400.0


def run_migrate(
    root: Path, dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    dirs_in_env(root, monkeypatch, dsn)
    monkeypatch.setenv("AGENTHUB_HTTP__IDEMPOTENCY_WINDOW_S", str(WINDOW_S))
    code = main(MIGRATE)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def usage_rows() -> list[UsageRow]:
    today = time.strftime("%Y-%m-%d")
    days = ["2020-01-30", "2020-01-31", today]
    return [
        UsageRow(day, purpose, "default", "wecom", chat, sender, "m", 100 + n, 10, 5, 1)
        for n, day in enumerate(days)
        for purpose, chat, sender in (("turn", "g", "alice"), ("turn", "g", "bob"), ("summary", "g", ""))
    ] + [UsageRow(today, "turn", "default", "wecom", "g", "alice", "m", 7, 7)]  # two calls of one group today


async def populate(data_dir: Path) -> None:
    await FileUsageStore(data_dir).add(usage_rows())
    keys = FileIdempotency(data_dir, window_s=WINDOW_S, fsync=False)
    assert await keys.claim("token:a", "key-live", "fp-live") is None
    await keys.accepted("token:a", "key-live")
    await keys.finish("token:a", "key-live", {"type": "done", "text": "答案"})
    old = FileIdempotency(data_dir, window_s=WINDOW_S, fsync=False, clock=lambda: time.time() - 2 * WINDOW_S)
    assert await old.claim("token:a", "key-old", "fp-old") is None


def summed(rows: list[UsageRow]) -> list[str]:
    return sorted(json.dumps(line.as_dict(), sort_keys=True) for line in group(rows, "user", "day", {}))


async def test_usage_days_and_live_idempotency_keys_are_copied_once(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    await populate(data_dir)
    code, out, err = await asyncio.to_thread(run_migrate, tmp_path, postgres_dsn, monkeypatch, capsys)
    assert code == 0, err
    assert "usage_days: 3 in the files, 3 verified in the database (3 copied now, 0 left" in out
    assert "idempotency: 1 in the files, 1 verified in the database (1 copied now, 0 left" in out
    database = await open_database(postgres_dsn)
    try:
        copied = await PostgresUsageStore(database).days("2000-01-01", "2100-01-01")
        assert summed(copied) == summed(await FileUsageStore(data_dir).days("2000-01-01", "2100-01-01"))
        keys = PostgresIdempotency(database, window_s=WINDOW_S)
        live = await keys.get("token:a", "key-live")
        assert live is not None and live.accepted and live.final == {"type": "done", "text": "答案"}
        assert live.fingerprint == "fp-live"
        assert await keys.get("token:a", "key-old") is None
        assert await keys.claim("token:a", "key-live", "fp-other") is not None  # a retry still finds it taken
    finally:
        await database.close()
    code, out, err = await asyncio.to_thread(run_migrate, tmp_path, postgres_dsn, monkeypatch, capsys)
    assert code == 0, err
    assert not [line for line in out.splitlines() if line.startswith(("copied ", "skipped "))]
    assert json.dumps(out).count("(0 copied now, 0 left") >= 2


async def test_forget_marks_are_copied_so_a_row_made_before_a_forget_stays_unnamed(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`data/usage/forgotten.json` becomes `usage_forgotten` rows (migration 23): a call made before alice's forget
    and written after the move (a dead process's spool replayed) names her tag, not her id; a second run copies
    nothing."""
    data_dir = tmp_path / "data"
    files = FileUsageStore(data_dir)
    made = time.time() - 60  # before the forget below
    await files.add(usage_rows())
    tag = forgotten_tag("wecom", "alice")
    await files.forget(Forgotten("wecom", "alice", tag, ("default",)))
    await files.forget(Forgotten("wecom", "bob", forgotten_tag("wecom", "bob"), ("default",), chat_id="g"))
    code, out, err = await asyncio.to_thread(run_migrate, tmp_path, postgres_dsn, monkeypatch, capsys)
    assert code == 0, err
    assert "usage_forget_marks: 2 in the files, 2 verified in the database (2 copied now, 0 left" in out
    database = await open_database(postgres_dsn)
    try:
        store = PostgresUsageStore(database)
        today = time.strftime("%Y-%m-%d")
        late = UsageRow(today, "turn", "default", "wecom", "dm", "alice", "m", 3, 4, at=made)
        await store.add([late])
        senders = {r.sender_id for r in await store.days(today, today) if r.input == 3}
        assert senders == {tag}
    finally:
        await database.close()
    code, out, err = await asyncio.to_thread(run_migrate, tmp_path, postgres_dsn, monkeypatch, capsys)
    assert code == 0, err
    assert "usage_forget_marks: 2 in the files, 2 verified in the database (0 copied now, 0 left" in out


HALF_PAIR = {"done": {"full_text": "半 \ud800 x"}}
"""A final answer holding half a UTF-16 pair (a model's JSON may escape one): no UTF-8, kept escaped."""


async def test_a_final_answer_holding_a_lone_surrogate_is_stored_and_read_back(database: Database) -> None:
    keys = PostgresIdempotency(database, window_s=WINDOW_S)
    assert await keys.claim("token:a", "k", "fp") is None
    await keys.finish("token:a", "k", HALF_PAIR)
    found = await PostgresIdempotency(database, window_s=WINDOW_S).get("token:a", "k")
    assert found is not None and found.final == HALF_PAIR


async def test_a_key_whose_final_answer_holds_a_lone_surrogate_is_copied(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = FileIdempotency(tmp_path / "data", window_s=WINDOW_S, fsync=False)
    assert await keys.claim("token:a", "k", "fp") is None
    await keys.finish("token:a", "k", HALF_PAIR)
    code, out, err = await asyncio.to_thread(run_migrate, tmp_path, postgres_dsn, monkeypatch, capsys)
    assert code == 0, err
    assert "idempotency: 1 in the files, 1 verified in the database (1 copied now, 0 left" in out
    database = await open_database(postgres_dsn)
    try:
        found = await PostgresIdempotency(database, window_s=WINDOW_S).get("token:a", "k")
        assert found is not None and found.final == HALF_PAIR
    finally:
        await database.close()
    code, out, err = await asyncio.to_thread(run_migrate, tmp_path, postgres_dsn, monkeypatch, capsys)
    assert code == 0 and "idempotency: 1 in the files, 1 verified in the database (0 copied now" in out, err
