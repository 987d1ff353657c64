"""Anthropic's cache diagnostics (design §15): asked for only where the vendor is Anthropic's own API, each chat's
previous reply named, and the `cache_miss_reason` it answers recorded in the `prompt_cache_break` line."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from agenthub.llm import AnthropicProvider, Endpoint, LLMRequest
from agenthub.llm.calllog import CallLog
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.fakes.prompt_cache import PromptCache

MARK = {"type": "ephemeral"}


def _request(turns: int, *, model: str = "claude-test", purpose: str = "turn", chat: str = "a:cli:c") -> LLMRequest:
    messages: list[dict[str, Any]] = []
    for i in range(turns):
        messages += [{"role": "user", "content": f"question {i} " * 50}, {"role": "assistant", "content": f"a {i}"}]
    newest = {"type": "text", "text": f"question {turns} " * 50, "cache_control": MARK}
    messages.append({"role": "user", "content": [newest]})
    system = [{"type": "text", "text": "You are helpful. " * 100, "cache_control": MARK}]
    return LLMRequest(model, system, messages, [], 64, purpose=purpose, chat=chat)


@pytest.fixture
async def diagnosing(fake_llm: FakeAnthropic) -> AsyncIterator[AnthropicProvider]:
    fake_llm.prompt_cache = PromptCache(min_tokens=0)
    endpoint = Endpoint(fake_llm.base_url, "sk-test", "claude-test", custom_base_url=True)
    provider = AnthropicProvider(endpoint, cache_diagnostics=True, call_log=CallLog())  # pretends to be Anthropic's
    yield provider
    await provider.aclose()


async def test_each_call_names_the_chats_previous_reply(diagnosing: AnthropicProvider, fake_llm: FakeAnthropic) -> None:
    first = await diagnosing.stream(_request(1))
    second = await diagnosing.stream(_request(2))
    other_chat = await diagnosing.stream(_request(1, chat="a:cli:other"))
    await diagnosing.complete(_request(2, purpose="summary"))
    bodies = [r.body or {} for r in fake_llm.message_requests()]
    assert bodies[0]["diagnostics"] == {"previous_message_id": None}  # the chat's first call opts in
    assert bodies[1]["diagnostics"] == {"previous_message_id": first.message_id} and first.message_id
    assert bodies[2]["diagnostics"] == {"previous_message_id": None}
    assert "diagnostics" not in bodies[3]  # not a chat's own call
    headers = [r.headers for r in fake_llm.message_requests()]
    assert all(h.get("anthropic-beta") == "cache-diagnosis-2026-04-07" for h in headers[:3])
    assert "anthropic-beta" not in headers[3]
    assert second.cache_miss_reason is None and other_chat.message_id != second.message_id


async def test_the_vendors_reason_is_recorded_with_the_break(diagnosing: AnthropicProvider) -> None:
    await diagnosing.stream(_request(1))
    with capture_logs() as logs:
        changed = await diagnosing.stream(_request(2, model="claude-other"))
    assert changed.cache_miss_reason is not None and changed.cache_miss_reason["type"] == "model_changed"
    breaks = [e for e in logs if e["event"] == "prompt_cache_break"]
    assert len(breaks) == 1 and breaks[0]["cause"] == "model_changed"
    assert breaks[0]["cache_miss_reason"]["type"] == "model_changed"
    assert diagnosing.call_log.cache.breaks["model_changed"] == 1


async def test_a_compatible_vendor_is_not_asked(fake_llm: FakeAnthropic) -> None:
    endpoint = Endpoint(fake_llm.base_url, "sk-test", "claude-test", custom_base_url=True)
    provider = AnthropicProvider(endpoint, call_log=CallLog())
    try:
        assert not provider.cache_diagnostics  # 127.0.0.1 is not api.anthropic.com
        await provider.stream(_request(1))
        await provider.stream(_request(2))
    finally:
        await provider.aclose()
    for recorded in fake_llm.message_requests():
        assert "diagnostics" not in (recorded.body or {}) and "anthropic-beta" not in recorded.headers
    official = Endpoint("https://api.anthropic.com", "sk-test", "claude-test", custom_base_url=False)
    assert AnthropicProvider(official).cache_diagnostics
