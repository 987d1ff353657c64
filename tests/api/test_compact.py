"""Manual compaction over HTTP: 409 while the session is busy, then a real compaction."""

from __future__ import annotations

import asyncio
import json

import pytest

from agenthub.session_keys import session_key
from tests.support.fakes.anthropic import FakeAnthropic, reply_text
from tests.support.harness import RunningApi
from tests.support.http import AGENT, assert_error
from tests.support.memory import is_summary_request, seed, summaries_then_default


async def test_compact_route_409_when_busy(api: RunningApi, fake_llm: FakeAnthropic) -> None:
    if api.gateway.turn_services.compactor is None:
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


async def test_compact_route_passes_the_focus_to_the_summary(api: RunningApi, fake_llm: FakeAnthropic) -> None:
    await seed(api.gateway, session_key("default", "http", "f1"), 30)
    fake_llm.responder = summaries_then_default()
    status, body = await api.call("POST", AGENT + "/sessions/f1/compact", json={"focus": "the deployment steps"})
    assert status == 200 and body["messages_after"] < body["messages_before"]
    [summary] = [r for r in fake_llm.message_requests() if is_summary_request(r.body or {})]
    assert "Focus the summary on: the deployment steps" in json.dumps(summary.body, ensure_ascii=False)
    status, body = await api.call("POST", AGENT + "/sessions/f1/compact", json={"focus": 42})
    assert status == 422
    assert_error(body, "validation_error")


async def test_compaction_answers_in_the_language_the_caller_asked_for(
    api: RunningApi, fake_llm: FakeAnthropic
) -> None:
    """No locale configured: the console in English (`?lang=en`) gets the route's result and `/compact`'s reply
    in English, as every other text of the product, not in the HTTP channel's zh-CN default."""
    fake_llm.responder = summaries_then_default()
    await seed(api.gateway, session_key("default", "http", "en1"), 30)
    status, body = await api.call("POST", AGENT + "/sessions/en1/compact?lang=en")
    assert status == 200 and body["result"].startswith("Compacted: "), body
    await seed(api.gateway, session_key("default", "http", "en2"), 30)
    request = {"chat_id": "en2", "content": "/compact"}
    status, body = await api.call("POST", AGENT + "/chat", json=request, headers={"Accept-Language": "en"})
    assert status == 200 and body["reply"].startswith("Compacted: "), body
    await seed(api.gateway, session_key("default", "http", "zh1"), 30)
    status, body = await api.call("POST", AGENT + "/sessions/zh1/compact", headers={"Accept-Language": "zh-CN"})
    assert status == 200 and body["result"].startswith("已压缩："), body
