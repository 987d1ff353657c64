"""The durable inbox across a crash, on a real `agenthub serve`: every HTTP chat request accepted before a
`kill -9` is answered into its session exactly once and in order after the restart, and one answered just before
the kill (its settle never written) is not sent to the model again."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest_asyncio

from agenthub.messages import InboundMessage
from agenthub.storage.inbox import INBOX_FILE, message_to_json
from agenthub.tokens import TokenStore
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, last_user_text, reply_text
from tests.support.paths import REPO

SESSIONS = 10
PER_SESSION = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Daemon:
    root: Path
    env: dict[str, str]
    port: int
    token: str

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def start(self) -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agenthub", "serve", env=self.env, cwd=self.root,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        await self._wait_ready(proc)
        return proc

    async def _wait_ready(self, proc: asyncio.subprocess.Process) -> None:
        async with asyncio.timeout(30), aiohttp.ClientSession() as client:
            while proc.returncode is None:
                try:
                    async with client.get(self.base + "/readyz") as resp:
                        if resp.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)
        raise AssertionError("the daemon exited before it was ready")

    async def metric(self, name: str) -> float:
        async with aiohttp.ClientSession() as client, client.get(self.base + "/metrics") as resp:
            for line in (await resp.text()).splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        raise AssertionError(f"no metric {name}")

    async def wait_metric(self, name: str, value: float) -> None:
        """Poll /metrics (the daemon is another process: nothing to await) until `name` reads `value`."""
        for _ in range(600):
            if await self.metric(name) == value:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{name} never reached {value}: {await self.metric(name)}")

    async def messages(self, chat_id: str) -> list[dict[str, Any]]:
        url = f"{self.base}/api/agents/default/sessions/{chat_id}/messages"
        async with aiohttp.ClientSession() as client, client.get(url, headers=self.auth) as resp:
            assert resp.status == 200, await resp.text()
            messages: list[dict[str, Any]] = (await resp.json())["messages"]
            return messages

    def chat(self, client: aiohttp.ClientSession, chat_id: str, content: str) -> asyncio.Task[None]:
        """A chat request left in flight (the kill cuts its connection: its outcome is not looked at)."""

        async def post() -> None:
            body = {"chat_id": chat_id, "content": content}
            async with client.post(self.base + "/api/agents/default/chat", json=body, headers=self.auth) as resp:
                await resp.read()

        return asyncio.create_task(post())


@pytest_asyncio.fixture
async def daemon(tmp_path: Path, fake_llm: FakeAnthropic) -> AsyncIterator[Daemon]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(REPO),
        "HOME": str(tmp_path),
        "NO_PROXY": "127.0.0.1,localhost",
        "AGENTHUB_DATA_DIR": str(tmp_path / "data"),
        "AGENTHUB_AGENTS_DIR": str(tmp_path / "agents"),
        "AGENTHUB_AUTH_DIR": str(tmp_path / "auth"),
        "AGENTHUB_WORKSPACE_DIR": str(tmp_path / "workspace"),
        "AGENTHUB_HTTP__PORT": str(_free_port()),
        "AGENTHUB_LLM__BASE_URL": fake_llm.base_url,
        "AGENTHUB_LLM__API_KEY": "test-key",
        "AGENTHUB_LLM__RETRY_BASE_S": "0.01",
    }
    token = TokenStore(tmp_path / "auth").create("test")
    yield Daemon(tmp_path, env, int(env["AGENTHUB_HTTP__PORT"]), token)


def _words(body: dict[str, Any]) -> str:
    return last_user_text(body).split("\n\n[")[0]


def _user_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "user" and "channel" in m]


async def _kill(proc: asyncio.subprocess.Process) -> None:
    proc.send_signal(signal.SIGKILL)
    await proc.wait()


async def test_thirty_requests_accepted_before_a_kill_are_answered_once_each_in_order_after_the_restart(
    daemon: Daemon, fake_llm: FakeAnthropic
) -> None:
    held = asyncio.Event()  # never set: the first run's model answers nothing

    def held_echo(body: dict[str, Any]) -> ScriptedReply:
        return reply_text("answer to " + _words(body), hold=held)

    fake_llm.responder = held_echo
    proc = await daemon.start()
    try:
        async with aiohttp.ClientSession() as client:
            in_flight = []
            for i in range(PER_SESSION):  # message i of every session at once; the next round once all are stored
                in_flight += [daemon.chat(client, f"s{s}", f"s{s}-m{i}") for s in range(SESSIONS)]
                await daemon.wait_metric("agenthub_inbox_depth", SESSIONS * (i + 1))
            await fake_llm.wait_for_requests(SESSIONS)  # every session's first turn is at the model
            await _kill(proc)
            await asyncio.gather(*in_flight, return_exceptions=True)
    finally:
        if proc.returncode is None:
            await _kill(proc)

    fake_llm.responder = lambda body: reply_text("answer to " + _words(body))
    proc = await daemon.start()
    try:
        await daemon.wait_metric("agenthub_inbox_depth", 0)
        for s in range(SESSIONS):
            messages = await daemon.messages(f"s{s}")
            assert _user_texts(messages) == [f"s{s}-m{i}" for i in range(PER_SESSION)]  # 0 lost, 0 twice, in order
            assert messages[-1]["role"] == "assistant"
            assert [m["role"] for m in messages].count("assistant") == 2  # m0 alone, then m1 and m2 together
    finally:
        await _kill(proc)


def _journal_line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False) + "\n"


async def test_an_entry_answered_before_the_kill_but_not_settled_is_not_sent_to_the_model_again(
    daemon: Daemon, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(reply_text("the only answer"))
    proc = await daemon.start()
    try:
        async with aiohttp.ClientSession() as client:
            await daemon.chat(client, "c1", "asked once")
        assert await daemon.metric("agenthub_inbox_depth") == 0
    finally:
        await _kill(proc)
    answered = await asyncio.to_thread(_entry_id_of_the_stored_message, daemon.root / "data", "c1")
    message = InboundMessage("http", "c1", "test", "asked once", agent="default", metadata={"chat_type": "private"})
    accept = {
        "op": "accept",
        "id": answered,
        "seq": 1,
        "at": 1.0,
        "source": "http",
        "payload": message_to_json(message),
    }
    journal = daemon.root / "data" / INBOX_FILE
    journal.write_text(_journal_line(accept), encoding="utf-8")  # the kill landed between the answer and the settle

    proc = await daemon.start()
    try:
        await daemon.wait_metric("agenthub_inbox_depth", 0)
        messages = await daemon.messages("c1")
        assert [(m["role"], m["content"]) for m in messages] == [
            ("user", "asked once"),
            ("assistant", "the only answer"),
        ]
        assert len(fake_llm.message_requests()) == 1
    finally:
        await _kill(proc)


def _entry_id_of_the_stored_message(data_dir: Path, chat_id: str) -> str:
    """The inbox id the HTTP request's user record was stored with (the JSONL history of the session)."""
    for path in data_dir.rglob("*.jsonl"):
        if chat_id not in path.name or path.name == INBOX_FILE:
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record.get("role") == "user" and isinstance(record.get("inbox_id"), str):
                return str(record["inbox_id"])
    raise AssertionError("no user record with an inbox id")
