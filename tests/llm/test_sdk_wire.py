"""The request `MessagesWire` prepares once is the one the SDK's own `messages.stream` sends, header for header."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import httpx2
import pytest

from agenthub.llm import Endpoint, LLMRequest
from agenthub.llm.sdk import request_body, stream
from agenthub.llm.sdk_wire import CACHE_DIAGNOSIS_BETA, MessagesWire
from tests.support.fakes.anthropic import FakeAnthropic

KEY = "sk-wire-test"
SYSTEM = [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}]
MESSAGES = [{"role": "user", "content": "hi 你好"}]


async def _sdk_call(fake: FakeAnthropic, extra_headers: dict[str, str] | None) -> None:
    client = anthropic.AsyncAnthropic(
        api_key=KEY,
        base_url=fake.base_url,
        timeout=anthropic.Timeout(7.0, connect=3.0),
        max_retries=0,
        default_headers={"x-api-key": KEY},
        http_client=anthropic.DefaultAioHttpClient(),
    )
    try:
        async with client.messages.stream(
            model="claude-test",
            max_tokens=64,
            system=SYSTEM,  # type: ignore[arg-type]
            messages=MESSAGES,  # type: ignore[arg-type]
            extra_headers=extra_headers,
        ) as events:
            await events.get_final_message()
    finally:
        await client.close()


def without_length(headers: dict[str, str]) -> dict[str, str]:
    return {name: value for name, value in headers.items() if name != "content-length"}


@pytest.mark.parametrize("diagnostics", [None, {"previous_message_id": None}])
async def test_the_wire_sends_the_sdks_headers_and_the_sdks_body(
    fake_llm: FakeAnthropic, diagnostics: dict[str, Any] | None
) -> None:
    extra = {"anthropic-beta": CACHE_DIAGNOSIS_BETA} if diagnostics is not None else None
    await _sdk_call(fake_llm, extra)
    wire = MessagesWire(Endpoint(fake_llm.base_url, KEY, "claude-test", custom_base_url=True), 7.0, 3.0)
    request = LLMRequest("claude-test", SYSTEM, MESSAGES, [], 64)
    try:
        await stream(wire, request, lambda _: None, diagnostics)
    finally:
        await wire.close()
    by_sdk, by_wire = fake_llm.message_requests()
    assert without_length(by_wire.headers) == without_length(by_sdk.headers)
    expected_body = {**(by_sdk.body or {}), **({"diagnostics": diagnostics} if diagnostics is not None else {})}
    assert by_wire.body == expected_body
    assert len(request_body(request, diagnostics)) == int(by_wire.headers["content-length"])


async def test_each_call_gets_its_own_request_from_the_prepared_one(fake_llm: FakeAnthropic) -> None:
    """Concurrent calls share the prepared request: none sees another's body or length."""
    wire = MessagesWire(Endpoint(fake_llm.base_url, KEY, "claude-test", custom_base_url=True), 7.0, 3.0)
    fake_llm.first_byte_delay_s = 0.05
    texts = [f"q{'x' * i}" for i in range(8)]
    try:
        calls = [LLMRequest("claude-test", [], [{"role": "user", "content": t}], [], 64) for t in texts]
        replies = await asyncio.gather(*(stream(wire, call, lambda _: None) for call in calls))
    finally:
        await wire.close()
    assert [r.text for r in replies] == [f"reply to: {t}" for t in texts]
    assert fake_llm.max_in_flight == len(texts)
    sent = {(r.body or {})["messages"][0]["content"]: int(r.headers["content-length"]) for r in fake_llm.requests}
    assert sent == {call.messages[0]["content"]: len(request_body(call)) for call in calls}


@pytest.mark.parametrize("cookie", [False, True])
@pytest.mark.parametrize("diagnostics", [False, True])
async def test_a_calls_request_is_what_httpx_builds_from_the_prepared_one(
    fake_llm: FakeAnthropic, diagnostics: bool, cookie: bool
) -> None:
    """Same method, URL, headers in the same order (cookie header included), body and extensions as
    `httpx2.Request(..., content=body, cookies=...)` over the prepared request."""
    wire = MessagesWire(Endpoint(fake_llm.base_url, KEY, "claude-test", custom_base_url=True), 7.0, 3.0)
    if cookie:
        wire.http.cookies.set("session", "abc", domain=httpx2.URL(fake_llm.base_url).host)
    body = request_body(LLMRequest("claude-test", SYSTEM, MESSAGES, [], 64))
    try:
        prepared = wire.prepared(diagnostics)
        expected = httpx2.Request(
            "POST",
            prepared.url,
            headers=prepared.headers,
            content=body,
            extensions=prepared.extensions,
            cookies=wire.http.cookies,
        )
        built = wire.request(body, diagnostics)
    finally:
        await wire.close()
    assert (built.method, built.url) == (expected.method, expected.url)
    assert built.headers.raw == expected.headers.raw
    assert (b"Cookie" in dict(built.headers.raw)) is cookie
    assert built.content == expected.content == body
    assert built.extensions == expected.extensions
