"""SIGTERM with a turn that outlives the drain: the waiting client is told, before its connection closes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp

from agenthub.config import Settings
from agenthub.daemon import Daemon
from agenthub.systemd import Notifier
from agenthub.tokens import TokenStore
from tests.support.fakes.anthropic import FakeAnthropic, reply_text


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
    await fake_llm.wait_for_requests(1)
    daemon.request_stop()
    status, body = await asyncio.wait_for(request, 10)
    assert status == 503
    assert body["error"]["code"] == "shutdown"
    assert await asyncio.wait_for(running, 10) == 0
