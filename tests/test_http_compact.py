"""Manual compaction over HTTP: 409 while the session is busy, then a real compaction."""

from __future__ import annotations

import asyncio

import pytest

from tests.fakes.anthropic import FakeAnthropic, reply_text
from tests.harness import RunningApi
from tests.test_http_api import AGENT, assert_error


async def test_compact_route_409_when_busy(api: RunningApi, fake_llm: FakeAnthropic) -> None:
    if api.gateway.compactor is None:
        pytest.fail("the memory layer must provide a compactor")
    fake_llm.script(reply_text("slow", first_byte_delay_s=0.5))
    await api.call("POST", AGENT + "/sessions", json={"chat_id": "k1"})
    running = asyncio.create_task(api.call("POST", AGENT + "/chat", json={"chat_id": "k1", "content": "hi"}))
    await fake_llm.wait_for_requests(1)
    status, body = await api.call("POST", AGENT + "/sessions/k1/compact")
    assert status == 409
    assert_error(body, "session_busy")
    await running
    status, body = await api.call("POST", AGENT + "/sessions/k1/compact")
    assert status == 200 and body["messages_after"] <= body["messages_before"]
