"""Two `agenthub serve` daemons (in one process) on one PostgreSQL: the chat requests one had accepted when it
stopped (its drain cut their turns) are answered by the other into their sessions, once each, within a pass."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from agenthub.config import Settings
from agenthub.hosting.daemon import Daemon
from agenthub.storage.meta import text_of
from tests.support.fakes.anthropic import FakeAnthropic, last_user_text, reply_text
from tests.support.roots import make_settings

TOKEN = "ahk_takeover-test-token-0123456789"
CHATS = 5
DEADLINE_S = 60.0


def daemon_settings(root: Path, dsn: str, llm: FakeAnthropic) -> Settings:
    return make_settings(
        root,
        llm.base_url,
        store={"backend": "postgres", "dsn": dsn, "lease_s": 3.0},
        http={"port": 0, "tokens": [TOKEN], "drain_timeout_s": 0.5},
        llm={"timeout_s": 3 * DEADLINE_S},
    )


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[Daemon]:
    daemon = Daemon(settings)
    task = asyncio.create_task(daemon.run())
    deadline = time.monotonic() + DEADLINE_S
    while daemon.server is None or not daemon.server.ready:
        assert not task.done(), task.exception()
        assert time.monotonic() < deadline, "the daemon never got ready"
        await asyncio.sleep(0.05)
    try:
        yield daemon
    finally:
        daemon.request_stop()
        await task


def base(daemon: Daemon) -> str:
    assert daemon.server is not None
    return f"http://127.0.0.1:{daemon.server.port}/api/agents/default"


def question(body: dict[str, Any]) -> str:
    return last_user_text(body).split("\n\n")[0]


async def test_what_a_stopping_daemon_accepted_and_did_not_answer_is_answered_by_the_other(
    tmp_path: Path, postgres_dsn: str
) -> None:
    held = asyncio.Event()  # never set: the stopping daemon's model answers nothing
    stopping_llm = FakeAnthropic(responder=lambda body: reply_text("never", hold=held))
    other_llm = FakeAnthropic(responder=lambda body: reply_text("答 " + question(body)))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        stopping_llm,
        other_llm,
        aiohttp.ClientSession() as client,
        running(daemon_settings(tmp_path / "b", postgres_dsn, other_llm)) as b,
    ):
        async with running(daemon_settings(tmp_path / "a", postgres_dsn, stopping_llm)) as a:

            async def ask(n: int) -> None:
                body = {"chat_id": f"c{n}", "content": f"问题 {n}"}
                async with client.post(base(a) + "/chat", json=body, headers=auth) as resp:
                    await resp.read()  # the stop cuts it: its outcome is not looked at

            asking = [asyncio.create_task(ask(n)) for n in range(CHATS)]
            await stopping_llm.wait_for_requests(CHATS, timeout_s=DEADLINE_S)
        await asyncio.gather(*asking)  # A has stopped: its turns were cut, its lease released
        histories = await answered(client, base(b), auth)
    for n in range(CHATS):
        assert histories[n] == [("user", f"问题 {n}"), ("assistant", f"答 问题 {n}")]
    assert sorted(question(r.body or {}) for r in other_llm.message_requests()) == [f"问题 {n}" for n in range(CHATS)]


async def answered(client: aiohttp.ClientSession, url: str, auth: dict[str, str]) -> dict[int, list[tuple[str, str]]]:
    """Each chat's messages through the other daemon's API, once every chat has an answer."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        histories: dict[int, list[tuple[str, str]]] = {}
        for n in range(CHATS):
            async with client.get(f"{url}/sessions/c{n}/messages", headers=auth) as resp:
                messages = (await resp.json())["messages"] if resp.status == 200 else []
            histories[n] = [(m["role"], text_of(m["content"])) for m in messages]
        if all(h and h[-1][0] == "assistant" for h in histories.values()) or time.monotonic() > deadline:
            return histories
        await asyncio.sleep(0.2)
