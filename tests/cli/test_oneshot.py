"""`agenthub chat -m` as a real subprocess: reply on stdout, errors on stderr, exit codes, offline mode."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from agenthub import i18n
from tests.support.cli import cli_env
from tests.support.fakes.anthropic import FakeAnthropic, http_error, reply_text, reply_tool
from tests.support.postgres import migrated


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


async def agenthub(
    root: Path, *args: str, llm: FakeAnthropic | None = None, env: dict[str, str] | None = None
) -> Result:
    """Run `python -m agenthub …` (with `env` added) without blocking the loop the fake LLM serves on."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agenthub",
        *args,
        env={**cli_env(root, llm), **(env or {})},
        cwd=Path.cwd(),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(60):
            out, err = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return Result(process.returncode, out.decode(), err.decode())


async def test_one_message_reply_on_stdout_exit_0(tmp_path: Path, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(reply_text("Hello from the model, 你好", chunks=5))
    result = await agenthub(tmp_path, "chat", "-m", "hi", llm=fake_llm)
    assert result.code == 0, result.stderr
    assert result.stdout == "Hello from the model, 你好\n"
    (request,) = fake_llm.message_requests()
    assert request.stream and request.headers["x-api-key"] == "test-key"
    assert request.body is not None and "hi" in str(request.body["messages"][-1]["content"])
    assert (tmp_path / "data" / "default" / "sessions" / "default_http_direct.jsonl").is_file()


async def test_llm_error_goes_to_stderr_with_exit_1(tmp_path: Path, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(http_error(401, "invalid x-api-key"))
    result = await agenthub(tmp_path, "chat", "--chat-id", "ops", "-m", "hi", llm=fake_llm)
    assert result.code == 1
    assert result.stdout == ""
    assert "error: The model service rejected the API key" in result.stderr
    assert "test-key" not in result.stderr


async def test_without_a_key_the_offline_provider_answers(tmp_path: Path) -> None:
    result = await agenthub(tmp_path, "chat", "-m", "are you there?")
    assert result.code == 0, result.stderr
    assert result.stdout.startswith("[offline]")
    assert "are you there?" in result.stdout
    assert "AGENTHUB_LLM__API_KEY" in result.stdout  # says how to configure a key
    assert result.stderr == ""  # the reply says it is offline: no log line repeats it on a first run


async def test_bad_input_exits_2_with_one_clear_line(tmp_path: Path) -> None:
    bad_id, no_config, empty = await asyncio.gather(
        agenthub(tmp_path, "chat", "--chat-id", "../etc", "-m", "hi"),
        agenthub(tmp_path, "--config", str(tmp_path / "missing.toml"), "chat", "-m", "hi"),
        agenthub(tmp_path, "chat", "-m", "  "),
    )
    for result in (bad_id, no_config, empty):
        assert result.code == 2, result
        assert result.stdout == ""
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("agenthub chat: "), result.stderr
    assert "chat_id" in bad_id.stderr
    assert "missing.toml" in no_config.stderr
    assert "non-empty" in empty.stderr
    sessions = tmp_path / "data" / "default" / "sessions"
    assert not sessions.exists() or not any(sessions.iterdir())


async def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path: Path) -> None:
    """`agenthub chat -m … | head -c 10`: the pipe closes before the reply is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody will ever read: the first write fails with EPIPE
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agenthub",
            "chat",
            "-m",
            "hi",
            env=cli_env(tmp_path, None),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=write_end,
            stderr=asyncio.subprocess.PIPE,
        )
    finally:
        os.close(write_end)
    async with asyncio.timeout(60):
        _, err = await process.communicate()
    assert process.returncode == 141
    assert "Traceback" not in err.decode() and "BrokenPipeError" not in err.decode()


@pytest.mark.parametrize(("lang", "locale"), [("zh_CN.UTF-8", "zh-CN"), ("en_US.UTF-8", "en")])
async def test_the_terminal_chat_follows_the_system_locale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lang: str, locale: str
) -> None:
    monkeypatch.setenv("LANG", lang)
    result = await agenthub(tmp_path, "chat", "-m", "/stop")
    assert (result.code, result.stdout.strip()) == (0, i18n.text("command.stop.nothing", locale))
    offline = await agenthub(tmp_path, "chat", "-m", "hello")
    assert offline.stdout.strip() == i18n.text(
        "llm.offline.reply", locale, echo=i18n.text("llm.offline.echo", locale, said="hello")
    )


async def test_a_job_made_in_a_chat_on_postgres_is_in_the_shared_store(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """`agenthub chat` on a postgres deployment keeps its jobs where every `serve` instance sees them."""
    dsn = migrated(postgres_dsn)
    job = {"action": "create", "at": "2099-12-02T09:00:00", "text": "交周报"}
    fake_llm.script(reply_tool("manage_cron_jobs", job), reply_text("好的"))
    env = {"AGENTHUB_STORE__BACKEND": "postgres", "AGENTHUB_STORE__DSN": dsn}
    result = await agenthub(tmp_path, "chat", "-m", "remind me", llm=fake_llm, env=env)
    assert result.code == 0, result.stderr
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cursor = await conn.execute("SELECT agent, doc->>'text', doc->>'chat_id' FROM jobs")
        assert await cursor.fetchall() == [("default", "交周报", "direct")]
    assert not (tmp_path / "data" / "default" / "jobs.json").exists()


async def test_lines_piped_in_are_answered_one_by_one_without_the_prompt(tmp_path: Path) -> None:
    """`printf 'hello\\nsecond\\n' | agenthub chat`: no terminal, so no prompt, toolbar or prompt_toolkit warning;
    each non-empty line is one message, its reply on stdout in turn."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agenthub", "chat",
        env={**cli_env(tmp_path, None), "LANG": "en_US.UTF-8"}, cwd=Path.cwd(),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(60):
        out, err = await process.communicate(b"hello\n\n/stop\n")
    assert (process.returncode, err.decode()) == (0, "")
    first, second = out.decode().splitlines()
    assert first.startswith("[offline]") and '"hello"' in first
    assert second == i18n.text("command.stop.nothing", "en")
