"""Crash safety: a writer SIGKILLed at random moments leaves a prefix of what it wrote, never corruption; the temp
files of killed atomic writes are removed when the daemon starts."""

from __future__ import annotations

import asyncio
import json
import random
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from agenthub.config import Settings
from agenthub.hosting.daemon import Daemon
from agenthub.hosting.systemd import Notifier
from agenthub.session.history import SessionHistory
from agenthub.session_keys import session_key
from agenthub.storage import jsonl
from agenthub.storage.meta import read_meta, text_of
from agenthub.storage.paths import AgentLayout
from tests.support.crash_writer import text_for, version_for
from tests.support.paths import CRASH_WRITER_SCRIPT, REPO

ROUNDS = 24
WRITER = CRASH_WRITER_SCRIPT
KEY = session_key("default", "cli", "crash")


async def _run_and_kill(data_dir: Path, rng: random.Random, fsync: bool) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(WRITER),
        str(data_dir),
        "fsync" if fsync else "nofsync",
        stdout=asyncio.subprocess.PIPE,
        cwd=REPO,
    )
    assert child.stdout is not None
    line = await asyncio.wait_for(child.stdout.readline(), timeout=20)
    assert line == b"ready\n"
    await asyncio.sleep(rng.uniform(0, 0.03))  # the random moment of the crash is the point of this test
    child.send_signal(signal.SIGKILL)
    assert await asyncio.wait_for(child.wait(), timeout=10) == -signal.SIGKILL


def _assert_prefix(records: list[dict[str, object]]) -> None:
    assert [r["seq"] for r in records] == list(range(len(records)))
    for r in records:
        assert isinstance(r["seq"], int)
        assert text_of(r["content"]) == text_for(r["seq"])


async def test_sigkill_at_random_moments_leaves_a_prefix(tmp_path: Path) -> None:
    rng = random.Random(20240601)
    path = AgentLayout(tmp_path, "default").history_file(KEY)
    seen = 0
    for round_number in range(ROUNDS):
        await _run_and_kill(tmp_path, rng, fsync=round_number % 4 == 0)
        records = jsonl.read_records(path)
        _assert_prefix(records)
        assert len(records) > seen  # each round's ready message survived, nothing earlier was lost
        seen = len(records)
        reloaded = await SessionHistory(tmp_path).load(KEY)  # a restart sees the same prefix
        assert [r["seq"] for r in reloaded] == [r["seq"] for r in records]
    meta = read_meta(AgentLayout(tmp_path, "default").meta_file(KEY))
    assert meta is not None and meta.title == text_for(0).strip()
    assert seen > ROUNDS


async def test_torn_tail_is_skipped_on_read_and_repaired_on_append(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    jsonl.append_records(path, [{"seq": 0}, {"seq": 1}])
    whole = json.dumps({"seq": 2, "content": "被截断的消息"}, ensure_ascii=False).encode() + b"\n"
    with path.open("ab") as f:
        f.write(whole[: len(whole) // 2])  # a power cut mid-append: half a line, cut inside a UTF-8 character
    assert jsonl.read_records(path) == [{"seq": 0}, {"seq": 1}]
    jsonl.append_records(path, [{"seq": 2}])
    assert path.read_bytes() == b'{"seq": 0}\n{"seq": 1}\n{"seq": 2}\n'
    assert jsonl.read_records(path) == [{"seq": 0}, {"seq": 1}, {"seq": 2}]


async def test_torn_only_line_is_repaired_to_empty(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"seq": 0, "content": "no newline yet')
    assert jsonl.read_records(path) == []
    jsonl.append_records(path, [{"seq": 0}])
    assert jsonl.read_records(path) == [{"seq": 0}]


async def test_history_repairs_a_torn_tail_left_by_a_crash(tmp_path: Path) -> None:
    history = SessionHistory(tmp_path, fsync=False)
    await history.append(KEY, {"role": "user", "content": "one"})
    path = history.layout("default").history_file(KEY)
    with path.open("ab") as f:
        f.write(b'{"role": "assistant", "content": "tw')
    restarted = SessionHistory(tmp_path, fsync=False)
    assert [m["content"] for m in await restarted.load(KEY)] == ["one"]
    await restarted.append(KEY, {"role": "assistant", "content": "two"})
    assert [m["content"] for m in jsonl.read_records(path)] == ["one", "two"]


TEMP_NAME = re.compile(r"^\..+\.tmp$")


def _temp_files(*roots: Path) -> list[Path]:
    return sorted(p for root in roots for p in root.rglob("*") if TEMP_NAME.match(p.name))


async def _kill_atomic_writer(paths: list[Path], rng: random.Random) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, str(WRITER), "atomic", *map(str, paths),
        stdout=asyncio.subprocess.PIPE, cwd=REPO,
    )  # fmt: skip
    assert child.stdout is not None
    assert await asyncio.wait_for(child.stdout.readline(), timeout=20) == b"ready\n"
    await asyncio.sleep(rng.uniform(0, 0.05))  # a random moment, most often while a temp file is being written
    child.send_signal(signal.SIGKILL)
    assert await asyncio.wait_for(child.wait(), timeout=10) == -signal.SIGKILL


def _is_whole_version(text: str) -> bool:
    found = re.match(r"version (\d+)\n", text)
    return found is not None and text == version_for(int(found.group(1)))


async def test_temp_files_of_killed_writers_are_removed_when_the_daemon_starts(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(http={"port": 0})
    memory = AgentLayout(settings.data_dir, "default").memory_file
    profile = settings.auth_dir / "USER.md"
    rng = random.Random(20261201)
    for _ in range(40):  # kill until several writes were cut off mid-way (most kills do that)
        await _kill_atomic_writer([memory, profile], rng)
        if len(_temp_files(settings.data_dir, settings.auth_dir)) >= 3:
            break
    left = _temp_files(settings.data_dir, settings.auth_dir)
    assert len(left) >= 3
    live_writer = await asyncio.create_subprocess_exec(sys.executable, "-c", "import time; time.sleep(60)")
    in_flight = settings.auth_dir / f".tokens.json.{live_writer.pid}.0123abcd.tmp"  # a live process's write
    in_flight.write_text("{}", encoding="utf-8")

    daemon = Daemon(settings, notifier=Notifier({}))
    running = asyncio.create_task(daemon.run())
    try:
        for _ in range(500):
            if daemon.server is not None and daemon.server.ready:
                break
            await asyncio.sleep(0.02)
        assert daemon.server is not None and daemon.server.ready
        assert _temp_files(settings.data_dir, settings.auth_dir) == [in_flight]
        assert _is_whole_version(memory.read_text(encoding="utf-8"))
        assert _is_whole_version(profile.read_text(encoding="utf-8"))
    finally:
        daemon.request_stop()
        assert await asyncio.wait_for(running, 20) == 0
        live_writer.kill()
        await live_writer.wait()
