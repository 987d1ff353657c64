"""The offline provider, and the fake Messages API's own behaviour (JSON replies, count_tokens, responder)."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import pytest

from agenthub.llm import LLMRequest, OfflineProvider
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, hang, last_user_text, reply_text


async def test_offline_streams_several_deltas_and_explains_setup() -> None:
    provider = OfflineProvider()
    tools = [{"name": "t", "description": "d", "input_schema": {"type": "object"}}]
    req = LLMRequest(
        "any-model", [{"type": "text", "text": "sys"}], [{"role": "user", "content": "hello, robot"}], tools, 99
    )
    deltas: list[str] = []
    resp = await provider.stream(req, deltas.append)
    assert len(deltas) >= 4
    assert "".join(deltas) == resp.text
    assert "offline" in resp.text.lower()
    assert "AGENTHUB_LLM__API_KEY" in resp.text and "ANTHROPIC_API_KEY" in resp.text
    assert "hello, robot" in resp.text
    assert resp.tool_uses == [] and resp.stop_reason == "end_turn"
    assert resp.usage.input_tokens > 0 and resp.usage.output_tokens > 0
    assert provider.knows_model("whatever !!") and provider.offline
    again = await provider.complete(req)
    assert again.text == resp.text


async def test_offline_echo_is_short_and_uses_last_user_text() -> None:
    long_text = "word " * 200
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": long_text}]},
    ]
    resp = await OfflineProvider().complete(LLMRequest("m", [], messages, [], 10))
    assert "first" not in resp.text
    assert len(resp.text) < 500


async def test_offline_counts_an_inline_image_as_an_image_not_as_its_base64_text() -> None:
    picture = {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "QUJD" * 250_000}}
    messages: list[dict[str, Any]] = [{"role": "user", "content": [picture, {"type": "text", "text": "what is it?"}]}]
    resp = await OfflineProvider().complete(LLMRequest("m", [], messages, [], 10))
    assert 1000 < resp.usage.input_tokens < 3000  # about one image (1600) and a few words, not 250k "tokens"


@pytest.fixture
def client(fake_llm: FakeAnthropic) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=fake_llm.base_url, api_key="k", max_retries=0, timeout=5)


async def test_fake_answers_json_and_echoes_by_default(
    fake_llm: FakeAnthropic, client: anthropic.AsyncAnthropic
) -> None:
    msg = await client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "abc"}])
    await client.close()
    assert msg.content[0].type == "text" and msg.content[0].text == "reply to: abc"
    assert msg.stop_reason == "end_turn" and msg.usage.input_tokens > 0
    assert not fake_llm.requests[0].stream


async def test_fake_count_tokens_and_responder(fake_llm: FakeAnthropic, client: anthropic.AsyncAnthropic) -> None:
    def responder(body: dict[str, Any]) -> ScriptedReply | None:
        return reply_text("SUMMARY") if "summarise" in last_user_text(body) else None

    fake_llm.responder = responder
    fake_llm.default_usage = {"cache_read_input_tokens": 5}
    count = await client.messages.count_tokens(model="m", messages=[{"role": "user", "content": "x" * 400}])
    summary = await client.messages.create(
        model="m", max_tokens=10, messages=[{"role": "user", "content": "please summarise"}]
    )
    chat = await client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    await client.close()
    assert count.input_tokens >= 100
    assert summary.content[0].type == "text" and summary.content[0].text == "SUMMARY"
    assert chat.content[0].type == "text" and chat.content[0].text == "reply to: hi"
    assert chat.usage.cache_read_input_tokens == 5


async def test_fake_rejects_a_body_without_messages(fake_llm: FakeAnthropic) -> None:
    client = anthropic.AsyncAnthropic(base_url=fake_llm.base_url, api_key="k", max_retries=0, timeout=5)
    with pytest.raises(anthropic.BadRequestError):
        await client.post("/v1/messages", body={"model": "m"}, cast_to=object)
    await client.close()


async def test_fake_stop_ends_a_hanging_request_quickly() -> None:
    fake = FakeAnthropic()
    await fake.start()
    fake.script(hang())
    client = anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="k", max_retries=0, timeout=5)
    call = asyncio.create_task(
        client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}])
    )
    try:
        await fake.wait_for_requests(1)
        assert fake.in_flight == 1
        async with asyncio.timeout(2):
            await fake.stop()
        with pytest.raises(anthropic.APIStatusError):
            await call
    finally:
        call.cancel()
        await client.close()
    assert fake.requests[0].completed.is_set() and not fake.requests[0].was_disconnected
