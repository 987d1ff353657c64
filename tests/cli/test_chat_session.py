"""`agenthub chat` names the session it opens and opens the same one with or without a daemon: a conversation
started alone goes on, with its history, once `agenthub serve` holds the data directory (and the console shows it)."""

from __future__ import annotations

from pathlib import Path

from agenthub.config import Settings
from agenthub.hosting.datalock import DataDirLock
from tests.support.cli import cli_env
from tests.support.fakes.anthropic import FakeAnthropic, reply_text
from tests.support.harness import running_api
from tests.support.terminal import Terminal


async def talk(env: dict[str, str], text: str, banner: str, reply: str) -> None:
    """One REPL run in a real terminal: wait for the banner, send `text`, wait for `reply`, Ctrl-D."""
    term = Terminal(env, Path.cwd())
    try:
        await term.wait_for(banner)
        await term.wait_for("›")
        term.type(text + "\r")
        await term.wait_for(reply)
        term.type("\x04")
        assert await term.exit_code() == 0, term.screen.decode(errors="replace")
    finally:
        term.close()


async def test_a_chat_started_without_the_daemon_goes_on_with_it(
    tmp_path: Path, settings: Settings, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(reply_text("first answer"), reply_text("second answer"))
    env = {**cli_env(tmp_path, fake_llm), "TERM": "xterm", "LANG": "en_US.UTF-8"}
    data_dir = settings.data_dir
    await talk(
        env,
        "first question",
        f"session default:http:direct (no daemon running: this terminal opens {data_dir}",
        "first answer",
    )
    async with running_api(settings) as api:
        lock = DataDirLock(data_dir)  # as `agenthub serve` holds it: the chat connects to the daemon
        lock.acquire(f"http=127.0.0.1:{api.server.port}")
        try:
            env["AGENTHUB_TOKEN"] = api.token
            banner = f"session default:http:direct via the daemon on 127.0.0.1:{api.server.port}"
            await talk(env, "second question", banner, "second answer")
        finally:
            lock.release()
        status, messages = await api.call("GET", "/api/agents/default/sessions/direct/messages")
    assert status == 200, messages
    said = [(m["role"], m["content"]) for m in messages["messages"]]
    assert said == [
        ("user", "first question"),
        ("assistant", "first answer"),
        ("user", "second question"),
        ("assistant", "second answer"),
    ]
    second = fake_llm.message_requests()[1].body
    assert second is not None and "first answer" in str(second["messages"])  # the daemon's turn saw the first one
