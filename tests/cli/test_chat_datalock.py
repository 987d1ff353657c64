"""`agenthub chat` without a daemon holds the data directory as `agenthub serve` does: while it runs, a daemon or
`agenthub forget` started beside it is refused (no second writer whose files a crash would replay over), and it
refuses, in the terminal's language, to open a data directory another command holds."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agenthub.config import Settings
from agenthub.hosting.datalock import DataDirLock
from tests.support.cli import cli_env
from tests.support.fakes.anthropic import FakeAnthropic, reply_text
from tests.support.terminal import Terminal


async def run_agenthub(env: dict[str, str], *args: str) -> tuple[int, str]:
    """`python -m agenthub <args>` as a child process; its exit code and what it wrote to stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agenthub", *args, env=env, cwd=Path.cwd(),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, err.decode()


@pytest.fixture
async def local_chat(tmp_path: Path, fake_llm: FakeAnthropic) -> AsyncIterator[tuple[Terminal, dict[str, str]]]:
    """A REPL of `agenthub chat` with no daemon, one turn answered (its history written), still running."""
    fake_llm.script(reply_text("first answer"))
    env = {**cli_env(tmp_path, fake_llm), "TERM": "xterm", "LANG": "en_US.UTF-8"}
    term = Terminal(env, Path.cwd())
    try:
        await term.wait_for("this terminal opens")
        await term.wait_for("›")
        term.type("first question\r")
        await term.wait_for("first answer")
        yield term, env
        term.type("\x04")
        assert await term.exit_code() == 0, term.screen.decode(errors="replace")
    finally:
        term.close()


def _files(history: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in history.rglob("*") if p.is_file()}


async def _answered_on_disk(history: Path) -> dict[Path, bytes]:
    """The history files once the chat's first answer is in them (the REPL shows it while it streams)."""
    for _ in range(200):
        files = await asyncio.to_thread(_files, history)
        if any(b"first answer" in data for data in files.values()):
            return files
        await asyncio.sleep(0.05)
    raise AssertionError(f"the chat's answer never reached {history}")


async def test_a_daemon_started_beside_a_local_chat_is_refused(local_chat: tuple[Terminal, dict[str, str]]) -> None:
    term, env = local_chat
    code, err = await run_agenthub({**env, "AGENTHUB_HTTP__PORT": "0", "AGENTHUB_LLM__OFFLINE": "true"}, "serve")
    assert code == 3, err
    assert f"pid={term.pid} chat" in err, err  # names who holds the data directory


async def test_forget_started_beside_a_local_chat_is_refused_and_changes_nothing(
    local_chat: tuple[Terminal, dict[str, str]], settings: Settings
) -> None:
    term, env = local_chat
    history = settings.data_dir / "default" / "sessions"
    before = await _answered_on_disk(history)  # the answer shows before its history append lands
    code, err = await run_agenthub(env, "forget", "--channel", "http", "--sender", "local", "--yes")
    assert code == 2, err
    assert f"pid={term.pid} chat" in err, err
    assert {p: p.read_bytes() for p in history.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize(
    ("lang", "refusal"),
    [("en_US.UTF-8", "is in use by agenthub forget"), ("zh_CN.UTF-8", "正被 agenthub forget")],
)
async def test_a_local_chat_refuses_a_data_dir_another_command_holds_in_the_terminal_s_language(
    tmp_path: Path, settings: Settings, fake_llm: FakeAnthropic, lang: str, refusal: str
) -> None:
    env = {**cli_env(tmp_path, fake_llm), "LANG": lang}
    lock = DataDirLock(settings.data_dir)
    lock.acquire("forget")  # as `agenthub forget` holds it while it redacts
    try:
        code, err = await run_agenthub(env, "chat", "-m", "hello")
    finally:
        lock.release()
    assert code == 1, err
    assert refusal in err and f"pid={os.getpid()}" in err, err
    assert "Traceback" not in err, err
    assert fake_llm.message_requests() == []  # nothing was asked, nothing written
    assert not list(settings.data_dir.glob("*/sessions/*.jsonl"))


async def test_a_killed_local_chat_leaves_the_data_dir_to_the_next_one_with_its_history(
    tmp_path: Path, settings: Settings, fake_llm: FakeAnthropic
) -> None:
    """`kill -9` of a local chat mid-REPL: its lock dies with it, the next chat opens the data directory (replaying
    what the killed one's commit log held) and its turn sees the first question (the answer shown may not have
    landed before the kill)."""
    fake_llm.script(reply_text("first answer"), reply_text("second answer"))
    env = {**cli_env(tmp_path, fake_llm), "TERM": "xterm", "LANG": "en_US.UTF-8"}
    term = Terminal(env, Path.cwd())
    try:
        await term.wait_for("›")
        term.type("first question\r")
        await term.wait_for("first answer")
        os.kill(term.pid, 9)
        assert await term.exit_code() == -9
    finally:
        term.close()
    code, err = await run_agenthub(env, "chat", "-m", "second question")
    assert code == 0, err
    second = fake_llm.message_requests()[1].body
    assert second is not None and "first question" in str(second["messages"])  # stored before the model was asked


async def test_local_chats_started_at_once_each_answer_or_are_refused_and_none_is_lost(
    tmp_path: Path, settings: Settings, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(*(reply_text(f"answer {n}") for n in range(3)))
    env = {**cli_env(tmp_path, fake_llm), "LANG": "en_US.UTF-8"}
    results = await asyncio.gather(*(run_agenthub(env, "chat", "-m", f"question {n}") for n in range(3)))
    answered = [n for n, (code, _) in enumerate(results) if code == 0]
    for code, err in results:
        assert code == 0 or (code == 1 and "is in use by agenthub chat" in err), err
    assert answered  # the first to take the lock answers
    lines = (settings.data_dir / "default" / "sessions" / "default_http_direct.jsonl").read_text().splitlines()
    assert sum('"role": "user"' in line for line in lines) == len(answered)
    assert len(lines) == 2 * len(answered)  # each answered chat's question and answer, nothing torn or doubled
