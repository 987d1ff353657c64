"""SIGTERM with a turn that outlives the drain: the waiting client is told, before its connection closes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from agenthub import i18n
from agenthub.config import Settings
from agenthub.hosting.daemon import Daemon
from agenthub.hosting.systemd import Notifier
from agenthub.storage.tokens import TokenStore
from tests.support.daemons import Deployment, Reply
from tests.support.fakes.anthropic import FakeAnthropic, last_user_text, reply_text

BURST = 12
CHAT = "/api/agents/default/chat"
KEY = {"Idempotency-Key": "drain-retry-1"}
START_BOUND_S = 60.0
"""A bound on a cold process's first model call under a loaded machine, not a measurement."""


async def test_a_turn_longer_than_the_drain_ends_with_a_shutdown_error(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory(http={"port": 0, "drain_timeout_s": 0.2})
    token = TokenStore(settings.auth_dir).create("test")
    daemon = Daemon(settings, notifier=Notifier({}))
    running = asyncio.create_task(daemon.run())
    for _ in range(500):
        if daemon.server is not None and daemon.server.ready:
            break
        await asyncio.sleep(0.02)
    assert daemon.server is not None and daemon.server.ready
    fake_llm.script(reply_text("too late", first_byte_delay_s=5.0))
    url = f"http://127.0.0.1:{daemon.server.port}/api/agents/default/chat"

    async def chat() -> tuple[int, Any]:
        async with (
            aiohttp.ClientSession() as client,
            client.post(
                url, json={"chat_id": "slow", "content": "hi"}, headers={"Authorization": f"Bearer {token}"}
            ) as resp,
        ):
            return resp.status, await resp.json()

    request = asyncio.create_task(chat())
    await fake_llm.wait_for_requests(1, timeout_s=START_BOUND_S)  # the process's first call loads the SDK
    daemon.request_stop()
    status, body = await asyncio.wait_for(request, 10)
    assert status == 503
    assert body["error"]["code"] == "shutdown"
    assert await asyncio.wait_for(running, 10) == 0


RESEND = {i18n.text("abort.shutdown", locale) for locale in ("zh-CN", "en")}
""""Send your message again": only for a message that was not stored."""


def _words(body: dict[str, Any]) -> str:
    return last_user_text(body).split("\n\n[")[0]


def _told_to_resend(reply: Reply) -> bool:
    final = reply.final
    message = final.data.get("message") if final is not None and final.event == "error" else None
    body = reply.body if isinstance(reply.body, str) else ""
    return message in RESEND or any(text in body for text in RESEND)


async def test_sigterm_cutting_slow_turns_of_a_start_up_burst_never_tells_a_stored_message_to_resend(
    tmp_path: Path, fake_llm: FakeAnthropic
) -> None:
    """A burst right after READY, slow model turns, SIGTERM with a 1-s drain: every message that was stored is told
    its answer will follow (never "send it again") and is answered exactly once after the restart; one told to
    send it again was not stored."""
    held = asyncio.Event()  # never set: the first run's model answers nothing
    fake_llm.responder = lambda body: reply_text("answer to " + _words(body), hold=held)
    env = {"AGENTHUB_HTTP__DRAIN_TIMEOUT_S": "1"}
    async with Deployment(tmp_path, fake_llm, count=1, env=env) as d:
        await d.start_all(warm=False)
        client, [daemon] = d.client(), d.instances
        keyed = {"chat_id": "keyed", "content": "keyed"}
        first_keyed = asyncio.create_task(client.call("POST", CHAT, daemon, json=keyed, headers=KEY))
        burst = [client.send(f"b{i}", f"burst {i}", daemon) for i in range(BURST)]
        await fake_llm.wait_for_requests(1, timeout_s=START_BOUND_S)  # a cold process: seconds on a loaded machine
        stopped = asyncio.create_task(daemon.stop())
        late = [client.send(f"late{i}", f"late {i}", daemon) for i in range(3)]  # stored before the stop, or refused
        assert await stopped == 0
        status, body = await first_keyed  # cut: the answer follows, to this key too
        assert status == 503 and body["error"]["message"] == i18n.text("abort.shutdown_stored", "zh-CN"), body
        sent = burst + late
        replies = await asyncio.gather(*(one.reply for one in sent))
        cut = [one for one, reply in zip(sent, replies, strict=True) if reply.final is not None]
        assert cut, "no turn was cut by the shutdown"
        for one, reply in zip(sent, replies, strict=True):
            final = reply.final
            if final is not None:  # a stored message whose turn the drain cut: told that the answer follows
                assert final.event == "error" and final.data["code"] == "shutdown", (one.content, final)
                assert final.data["message"] == i18n.text("abort.shutdown_stored", "zh-CN"), (one.content, final)
        refused = {one.chat_id for one, reply in zip(sent, replies, strict=True) if reply.status != 200}
        assert {one.chat_id for one, reply in zip(sent, replies, strict=True) if _told_to_resend(reply)} <= refused

        fake_llm.responder = lambda body: reply_text("answer to " + _words(body))
        await d.restart(daemon.index, warm=False)
        await client.wait_metric(daemon, "agenthub_inbox_depth", 0)
        status, body = await client.call("POST", CHAT, daemon, json=keyed, headers=KEY)  # the client's retry
        assert status == 200 and body["reply"] == "answer to keyed", body
        messages = await client.messages("keyed", daemon)
        assert [m["content"] for m in messages if m["role"] == "user"] == ["keyed"]  # answered once, not twice
        for one in sent:
            status, body = await client.call("GET", f"/api/agents/default/sessions/{one.chat_id}/messages", daemon)
            messages = body.get("messages", []) if status == 200 else []
            users = [m["content"] for m in messages if m["role"] == "user" and "channel" in m]
            if one.chat_id in refused:
                assert users == [], (one.chat_id, messages)  # refused (maybe told to send it again): not stored
            else:
                assert users == [one.content], (one.chat_id, messages)  # stored: answered exactly once
                assert [m["content"] for m in messages if m["role"] == "assistant"] == [f"answer to {one.content}"]
