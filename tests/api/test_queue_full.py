"""A chat whose queue is full answers HTTP 429 `queue_full` at once, and the refused message is not stored."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from agenthub.config import Settings
from agenthub.session_keys import session_key
from tests.support.fakes.anthropic import FakeAnthropic, reply_text
from tests.support.harness import RunningApi
from tests.support.http import AGENT


@pytest.fixture
def settings(settings_factory: Callable[..., Settings]) -> Settings:
    return settings_factory(session={"max_queued": 1})


async def test_one_message_too_many_is_a_429(api: RunningApi, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(reply_text("first", first_byte_delay_s=0.5), reply_text("second"))
    first = asyncio.create_task(api.call("POST", AGENT + "/chat", json={"chat_id": "q", "content": "1"}))
    await fake_llm.wait_for_requests(1)  # running
    second = asyncio.create_task(api.call("POST", AGENT + "/chat", json={"chat_id": "q", "content": "2"}))
    for _ in range(200):  # until the second one waits in the queue
        runner = api.gateway.sessions.get(session_key("default", "http", "q"))
        if runner is not None and runner.queue:
            break
        await asyncio.sleep(0.01)
    status, body = await api.call("POST", AGENT + "/chat", json={"chat_id": "q", "content": "3"})
    assert status == 429 and body["error"]["code"] == "queue_full"
    assert [(await t)[0] for t in (first, second)] == [200, 200]
    history = await api.gateway.history.load(session_key("default", "http", "q"))
    assert [m["content"] for m in history if m["role"] == "user"] == ["1", "2"]
