"""`agenthub store migrate --from files --to postgres`: a populated files data dir copied whole (sessions with
archive and meta, every kind of memory file, tokens, unanswered inbox entries), a second run copies nothing, a run
killed midway resumes, and it refuses to run while a daemon holds the data directory."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from agenthub.cli import main
from agenthub.hosting.datalock import DataDirLock
from agenthub.session_keys import SessionKey, session_key
from agenthub.storage.copy_run import COPYING, Held, decide
from agenthub.storage.files import FileSessionStore
from agenthub.storage.inbox import FileInbox
from agenthub.storage.jobs import FileJobDocuments, JobDocument
from agenthub.storage.memory_files import FileMemoryStore, MemoryName
from agenthub.storage.meta import SessionMeta
from agenthub.storage.postgres import (
    PostgresInbox,
    PostgresJobs,
    PostgresMemoryStore,
    PostgresSessionStore,
    PostgresTokens,
    open_database,
)
from agenthub.storage.tokens import TokenStore
from tests.support.paths import REPO

MIGRATE = ["store", "migrate", "--from", "files", "--to", "postgres"]
GROUP = session_key("default", "wecom", "group-1")
ALICE = session_key("default", "wecom", "alice")
MEMORY = {
    MemoryName.agent_memory("default"): "# 记忆\n- 用户喜欢简短的回答\n",
    MemoryName.agent_memory("default").backup_name(): "# 旧的记忆\n",
    MemoryName.agent_memory("reviewer"): "reviewer memory\n",
    MemoryName.chat_memory(GROUP): "group memory 😀\n",
    MemoryName.shared_profile(): "shared profile\n",
    MemoryName.person_profile("default", ALICE, "alice", "private"): "alice, private\n",
    MemoryName.person_profile("default", GROUP, "alice", "group"): "alice in group-1\n",
    MemoryName.l3_state("default"): '{"watermarks": {"default:wecom:group-1": 3}}',
}


def env(root: Path, dsn: str) -> dict[str, str]:
    return {
        "AGENTHUB_DATA_DIR": str(root / "data"),
        "AGENTHUB_AGENTS_DIR": str(root / "agents"),
        "AGENTHUB_AUTH_DIR": str(root / "auth"),
        "AGENTHUB_WORKSPACE_DIR": str(root / "workspace"),
        "AGENTHUB_STORE__DSN": dsn,
    }


def msg(text: str, role: str = "user") -> dict[str, Any]:
    return {"role": role, "content": text, "timestamp": 1_700_000_000}


def session(n: int) -> SessionKey:
    return session_key("default" if n % 3 else "reviewer", "http", f"chat-{n}")


async def populate(root: Path, sessions: int) -> list[str]:
    """A files deployment; the ids of its two unanswered inbox entries."""
    store = FileSessionStore(root / "data", fsync=False)
    for n in range(sessions):
        key = session(n)
        await store.append(key, [msg(f"问题 {n}"), msg(f"回答 {n}", "assistant")] * (1 + n % 3))
        if n % 4 == 0:
            await store.replace(key, [msg(f"summary {n}", "assistant")], archive=[msg(f"old {n}")] * 2)
        await store.write_meta(key, SessionMeta(f"chat-{n}", title=f"标题 {n}", created_at=n), durable=False)
    memory = FileMemoryStore(root / "data", root / "auth", durable=False)
    for name, text in MEMORY.items():
        await memory.write(name, text)
    tokens = TokenStore(root / "auth")
    tokens.create("console")
    tokens.create("ci")
    inbox = FileInbox(root / "data", fsync=False)
    entries = [await inbox.accept(f"wecom:app-{n}", {"n": n, "text": "未回答"}) for n in range(3)]
    await inbox.settle(entries[1].id)
    await inbox.aclose()
    return [entries[0].id, entries[2].id]


def run_migrate(
    root: Path, dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    for name, value in env(root, dsn).items():
        monkeypatch.setenv(name, value)
    code = main(MIGRATE)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


async def test_a_populated_data_dir_is_copied_whole_and_a_second_run_copies_nothing(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inbox_ids = await populate(tmp_path, sessions=12)
    code, out, err = await asyncio.to_thread(run_migrate, tmp_path, postgres_dsn, monkeypatch, capsys)
    assert code == 0, err
    assert "sessions: 12 in the files, 12 verified in the database (12 copied now, 0 left" in out
    assert "memory_files: 8 in the files, 8 verified in the database (8 copied now, 0 left" in out
    assert "tokens: 2 in the files, 2 verified in the database (2 copied now, 0 left" in out
    assert "inbox: 2 in the files, 2 verified in the database (2 copied now, 0 left" in out
    assert "verified: every item copied matches the files" in out
    database = await open_database(postgres_dsn)
    try:
        files = FileSessionStore(tmp_path / "data")
        copied = PostgresSessionStore(database)
        for n in range(12):
            key = session(n)
            assert await copied.load(key) == await files.load(key)
            assert await copied.read_archive(key) == await files.read_archive(key)
            assert await copied.read_meta(key) == await files.read_meta(key)
        memory = PostgresMemoryStore(database)
        assert {name: await memory.read(name) for name in MEMORY} == MEMORY
        token_names = sorted(t.name for t in await PostgresTokens(database).stored())
        assert token_names == ["ci", "console"]
        stored = sorted((t.name, t.sha256, t.created_at) for t in TokenStore(tmp_path / "auth").stored())
        assert stored == sorted((t.name, t.sha256, t.created_at) for t in await PostgresTokens(database).stored())
        assert [e.id for e in await PostgresInbox(database).unsettled()] == inbox_ids
    finally:
        await database.close()
    code, out, err = await asyncio.to_thread(run_migrate, tmp_path, postgres_dsn, monkeypatch, capsys)
    assert code == 0, err
    assert not [line for line in out.splitlines() if line.startswith(("copied ", "skipped "))]
    assert all("(0 copied now, 0 left" in line for line in out.splitlines() if "in the database" in line)


async def test_it_refuses_to_run_while_a_daemon_holds_the_data_dir(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    await populate(tmp_path, sessions=1)
    lock = DataDirLock(tmp_path / "data")
    lock.acquire("http=127.0.0.1:8080")
    try:
        code, out, err = await asyncio.to_thread(run_migrate, tmp_path, postgres_dsn, monkeypatch, capsys)
    finally:
        lock.release()
    assert code == 3 and "agenthub store migrate:" in err and out == ""
    database = await open_database(postgres_dsn)
    try:
        assert await PostgresSessionStore(database).list_keys("default") == []
    finally:
        await database.close()


async def test_a_run_killed_midway_resumes_where_it_stopped(tmp_path: Path, postgres_dsn: str) -> None:
    sessions = 90
    await populate(tmp_path, sessions=sessions)
    child_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENTHUB_")},
        **env(tmp_path, postgres_dsn),
    }
    child_env["PYTHONPATH"] = str(REPO)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agenthub", *MIGRATE, env=child_env, cwd=tmp_path, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    reported = 0
    while reported < 10:  # log lines (the schema migrated) come first
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert line, "the copy ended before it was killed"
        reported += line.startswith(b"copied ")
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    again = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agenthub", *MIGRATE, env=child_env, cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(again.communicate(), 120)
    text = out.decode()
    assert again.returncode == 0, err.decode()
    summary = next(line for line in text.splitlines() if line.startswith("sessions:"))
    copied_now = int(summary.rsplit("(", 1)[1].split()[0])
    assert summary.startswith(f"sessions: {sessions} in the files, {sessions} verified in the database")
    assert copied_now <= sessions - 10  # the ten reported before the kill were skipped
    assert "verified: every item copied matches the files" in text


async def test_a_re_run_after_the_database_moved_on_overwrites_nothing_and_reports_what_it_left(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inbox_ids = await populate(tmp_path, sessions=6)
    code, out, err = await asyncio.to_thread(run_migrate, tmp_path, postgres_dsn, monkeypatch, capsys)
    assert code == 0, err
    answered_on_postgres, compacted_on_postgres = session(1), session(2)
    database = await open_database(postgres_dsn)
    try:  # the deployment runs on PostgreSQL now: a turn, a compaction, an L3 rewrite, a revoke, a settle
        sessions, memory = PostgresSessionStore(database), PostgresMemoryStore(database)
        await sessions.append(answered_on_postgres, [msg("new question"), msg("new answer", "assistant")])
        compacted = await sessions.load(compacted_on_postgres)
        await sessions.replace(compacted_on_postgres, [msg("[summary]", "system")], archive=compacted)
        await memory.write(MemoryName.agent_memory("default"), "# rewritten by L3 on PostgreSQL\n")
        assert await PostgresTokens(database).revoke("ci")
        await PostgresInbox(database).settle(inbox_ids[0])
        before = {n: await sessions.load(session(n)) for n in range(6)}
    finally:
        await database.close()
    fresh = FileSessionStore(tmp_path / "data")
    await fresh.append(session(3), [msg("said on files after the copy")])  # the files moved on, the database not

    code, out, err = await asyncio.to_thread(run_migrate, tmp_path, postgres_dsn, monkeypatch, capsys)

    assert code == 0, err  # what the database changed is not a difference
    database = await open_database(postgres_dsn)
    try:
        sessions = PostgresSessionStore(database)
        for n in (1, 2):
            assert await sessions.load(session(n)) == before[n]  # never overwritten with the older files
        assert await sessions.load(session(3)) == await fresh.load(session(3))  # untouched copy: brought up to date
        text = await PostgresMemoryStore(database).read(MemoryName.agent_memory("default"))
        assert text == "# rewritten by L3 on PostgreSQL\n"
        assert [t.name for t in await PostgresTokens(database).stored()] == ["console"]  # not revived
        assert [e.id for e in await PostgresInbox(database).unsettled()] == inbox_ids[1:]  # not answered twice
    finally:
        await database.close()
    skipped = [line for line in out.splitlines() if line.startswith("skipped ")]
    assert sorted(skipped) == sorted(
        [
            f"skipped sessions {answered_on_postgres}: its history in the database has changed since it was copied",
            f"skipped sessions {compacted_on_postgres}: its history in the database has changed since it was copied",
            "skipped memory_files agent_memory/default///: the database's file has changed since it was copied",
            "skipped tokens ci: revoked or replaced in the database since it was copied",
            f"skipped inbox {inbox_ids[0]}: answered in the database since it was copied",
        ]
    )
    assert f"copied {session(3)}" in out
    assert "sessions: 6 in the files, 4 verified in the database (1 copied now, 2 left as the database has them)" in out
    assert "tokens: 2 in the files, 1 verified in the database (0 copied now, 1 left" in out
    assert "inbox: 2 in the files, 1 verified in the database (0 copied now, 1 left" in out
    assert "verified: every item copied matches the files; 5 left as the database has them" in out


async def test_a_session_the_database_holds_without_a_copy_from_here_is_left_and_the_run_fails(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    await populate(tmp_path, sessions=2)
    database = await open_database(postgres_dsn)
    try:  # an instance on PostgreSQL answered in this chat before the files were copied
        await PostgresSessionStore(database).append(session(1), [msg("asked on PostgreSQL first")])
    finally:
        await database.close()
    code, out, err = await asyncio.to_thread(run_migrate, tmp_path, postgres_dsn, monkeypatch, capsys)
    assert code == 1
    assert f"skipped sessions {session(1)}: the database holds another one, not copied from these files" in out
    assert "1 items not copied" in err
    database = await open_database(postgres_dsn)
    try:
        assert await PostgresSessionStore(database).load(session(1)) == [msg("asked on PostgreSQL first")]
    finally:
        await database.close()


async def test_scheduled_jobs_are_copied_once_and_one_already_there_is_left_as_it_is(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    files = FileJobDocuments(tmp_path / "data", durable=False)
    jobs = [_job(f"j{n}", agent) for n, agent in enumerate(["default", "default", "reviewer"])]
    for doc in jobs:
        await files.put(doc)
    code, out, err = await asyncio.to_thread(run_migrate, tmp_path, postgres_dsn, monkeypatch, capsys)
    assert code == 0, err
    assert "jobs: 3 in the files, 3 verified in the database (3 copied now, 0 left" in out
    database = await open_database(postgres_dsn)
    try:
        shared = PostgresJobs(database)
        assert sorted(await shared.load_all(), key=lambda d: d.job_id) == jobs
        advanced = _job("j0", "default", next_due=2_000_000_000.0)  # it fired on a running instance meanwhile
        await shared.put(advanced)
        code, out, err = await asyncio.to_thread(run_migrate, tmp_path, postgres_dsn, monkeypatch, capsys)
        assert code == 0, err
        assert "jobs: 3 in the files, 2 verified in the database (0 copied now, 1 left" in out
        assert "skipped jobs default/j0: changed or run in the database since it was copied" in out
        assert [d for d in await shared.load_all() if d.job_id == "j0"] == [advanced]
    finally:
        await database.close()


async def test_a_memory_file_whose_name_this_product_never_made_is_left_behind(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Memory files are copied by their `MemoryName`; a stray file (a name no session key makes) has none."""
    await populate(tmp_path, sessions=1)
    chats = tmp_path / "data" / "default" / "memory" / "chats"
    (chats / "stray name.md").write_text("not ours\n", encoding="utf-8")
    (tmp_path / "auth" / "users" / "group" / "not a chat").mkdir()
    (tmp_path / "auth" / "users" / "group" / "not a chat" / "default_wecom_alice.md").write_text("x", encoding="utf-8")
    code, out, err = await asyncio.to_thread(run_migrate, tmp_path, postgres_dsn, monkeypatch, capsys)
    assert code == 0, err
    assert "memory_files: 8 in the files, 8 verified in the database (8 copied now, 0 left" in out


def test_a_re_run_copies_only_what_the_database_lacks_or_still_holds_as_copied() -> None:
    files, copied, changed = "files-now", "as-copied", "changed-there"
    assert decide(files, Held(files), copied) == "same"
    assert decide(files, Held(None), None) == "copy"  # never copied
    assert decide(files, Held("partial", behind=True), None) == "copy"  # a copy without a record, cut short
    assert decide(files, Held(copied), copied) == "copy"  # the files moved on, the database's copy did not
    assert decide(files, Held("half-written"), COPYING + files) == "copy"  # a run cut short while writing it
    assert decide(files, Held(changed), copied) == "moved"  # answered, rewritten, revoked there since
    assert decide(files, Held(None), copied) == "moved"  # settled or revoked there since
    assert decide(files, Held(changed), None) == "conflict"  # the database's own, never copied from here


def _job(job_id: str, agent: str, next_due: float = 1_900_000_000.0) -> JobDocument:
    body = {"id": job_id, "agent": agent, "channel": "wecom", "chat_id": "g", "text": "交周报", "next_due": next_due}
    return JobDocument(agent, job_id, next_due, json.dumps(body, ensure_ascii=False, separators=(",", ":")))


CUT_AFTER_RESTORE = """
CREATE FUNCTION cut_short() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
    IF NEW.kind = 'inbox' AND NEW.digest NOT LIKE 'copying:%' THEN RAISE EXCEPTION 'the run is cut short'; END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER cut_short BEFORE INSERT OR UPDATE ON store_copies FOR EACH ROW EXECUTE FUNCTION cut_short();
"""
"""The run stops at the final ledger record of its first inbox entry (what a crash right after `restore` leaves)."""


async def answer_every_unanswered(dsn: str) -> list[str]:
    """What a PostgreSQL instance does with the entries it finds without an owner: claim and answer each (settled,
    so deleted)."""
    database = await open_database(dsn)
    try:
        inbox = PostgresInbox(database, owner="instance-a")
        answered = [entry.id for entry in await inbox.claim_orphans(await inbox.orphan_sources())]
        for entry_id in answered:
            await inbox.settle(entry_id)
        return answered
    finally:
        await database.close()


async def test_a_re_run_after_a_run_cut_short_after_restoring_an_entry_never_answers_it_twice(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inbox_ids = await populate(tmp_path, sessions=1)
    database = await open_database(postgres_dsn)
    try:
        async with database.connection("cut the run short") as conn:
            await conn.execute(CUT_AFTER_RESTORE)
    finally:
        await database.close()
    code, _, _ = await asyncio.to_thread(run_migrate, tmp_path, postgres_dsn, monkeypatch, capsys)
    assert code != 0
    answered = await answer_every_unanswered(postgres_dsn)  # a live instance answers what the cut run left
    database = await open_database(postgres_dsn)
    try:
        async with database.connection("let the run go on") as conn:
            await conn.execute("DROP TRIGGER cut_short ON store_copies")
    finally:
        await database.close()

    code, out, err = await asyncio.to_thread(run_migrate, tmp_path, postgres_dsn, monkeypatch, capsys)

    assert code == 0, err
    assert "verified: every item copied matches the files" in out
    answered += await answer_every_unanswered(postgres_dsn)
    assert sorted(answered) == sorted(inbox_ids)  # each answered once: none lost, none restored after its answer


async def test_a_session_whose_title_holds_a_lone_surrogate_is_copied_and_verified(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A title (a user's first words, or a rename) may hold a lone surrogate: both stores keep it as an escape, and
    the run's digests of it must not fail on it."""
    store = FileSessionStore(tmp_path / "data", fsync=False)
    await store.append(ALICE, [msg("hi")])
    meta = SessionMeta(ALICE.chat_id, title="lone \ud800", created_at=1)
    await store.write_meta(ALICE, meta, durable=False)
    code, out, err = await asyncio.to_thread(run_migrate, tmp_path, postgres_dsn, monkeypatch, capsys)
    assert code == 0, err
    assert "sessions: 1 in the files, 1 verified in the database (1 copied now, 0 left" in out
    database = await open_database(postgres_dsn)
    try:
        copied = await PostgresSessionStore(database).read_meta(ALICE)
        assert copied == await store.read_meta(ALICE) and copied is not None and copied.title == meta.title
    finally:
        await database.close()
