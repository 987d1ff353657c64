"""AnthropicProvider through the real SDK against the fake Messages API: streaming, usage, retries, errors."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anthropic
import pytest

from agenthub import i18n
from agenthub.errors import ContextOverflowError, LLMError
from agenthub.llm import AnthropicProvider, Endpoint, LLMRequest, ModelNotFoundError, RetryPolicy
from agenthub.llm.failures import MSG_AUTH, MSG_BUSY, MSG_INTERRUPTED, MSG_TIMEOUT
from agenthub.messages import Usage
from tests.support.fakes.anthropic import (
    FakeAnthropic,
    ScriptedReply,
    cut_stream,
    hang,
    http_error,
    midstream_error,
    overloaded,
    prompt_too_long,
    rate_limited,
    reply_text,
    reply_tool,
    server_error,
)

KEY = "sk-test-secret-123"


class RecordingSleep:
    """An injected sleep: records requested delays and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await asyncio.sleep(0)


@pytest.fixture
def sleeps() -> RecordingSleep:
    return RecordingSleep()


def make(fake: FakeAnthropic, sleep: RecordingSleep, *, retries: int = 2, timeout_s: float = 5.0) -> AnthropicProvider:
    endpoint = Endpoint(fake.base_url, KEY, "claude-test", custom_base_url=True)
    policy = RetryPolicy(max_retries=retries, base_s=0.01, max_s=0.05, jitter=0.0)
    return AnthropicProvider(endpoint, timeout_s=timeout_s, connect_timeout_s=2.0, retry=policy, sleep=sleep)


@pytest.fixture
async def provider(fake_llm: FakeAnthropic, sleeps: RecordingSleep) -> AsyncIterator[AnthropicProvider]:
    p = make(fake_llm, sleeps)
    yield p
    await p.aclose()


def request(text: str = "hello", **kw: object) -> LLMRequest:
    base: dict[str, object] = {
        "model": "claude-test",
        "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": text}],
        "tools": [],
        "max_tokens": 256,
    }
    base.update(kw)
    return LLMRequest(**base)  # type: ignore[arg-type]


async def test_text_streams_in_several_deltas(fake_llm: FakeAnthropic, provider: AnthropicProvider) -> None:
    fake_llm.script(reply_text("Hello there, how are you today?", chunks=4))
    deltas: list[str] = []
    resp = await provider.stream(request(), deltas.append)
    assert len(deltas) == 4
    assert "".join(deltas) == resp.text == "Hello there, how are you today?"
    assert resp.stop_reason == "end_turn"
    assert resp.model == "claude-test"
    body = fake_llm.requests[0].body
    assert body is not None and body["stream"] is True
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert "tools" not in body


async def test_a_lone_surrogate_in_the_models_text_arrives_as_u_fffd(
    fake_llm: FakeAnthropic, provider: AnthropicProvider
) -> None:
    """Half a UTF-16 pair (the vendor's JSON can carry `"\\ud800"`) cannot be written as UTF-8 anywhere the reply
    goes (a memory file, a cache file, a database): the response's text holds U+FFFD in its place."""
    fake_llm.script(reply_text("A \ud800 B", chunks=1))
    resp = await provider.complete(request())
    assert resp.text == "A \ufffd B"
    resp.text.encode("utf-8")


async def test_tool_use_input_arrives_parsed(fake_llm: FakeAnthropic, provider: AnthropicProvider) -> None:
    tool = {"name": "get_weather", "description": "weather", "input_schema": {"type": "object"}}
    fake_llm.script(reply_tool("get_weather", {"city": "北京", "unit": "c"}, text="Let me check.", chunks=5))
    deltas: list[str] = []
    resp = await provider.stream(request(tools=[tool], tool_choice={"type": "auto"}), deltas.append)
    assert "".join(deltas) == "Let me check."
    assert resp.stop_reason == "tool_use"
    [use] = resp.tool_uses
    assert use["name"] == "get_weather"
    assert use["input"] == {"city": "北京", "unit": "c"}
    assert use["id"].startswith("toolu_")
    assert set(use) == {"type", "id", "name", "input"}
    body = fake_llm.requests[0].body
    assert body is not None and body["tools"] == [tool] and body["tool_choice"] == {"type": "auto"}


async def test_thinking_and_server_blocks_are_kept_as_plain_data(
    fake_llm: FakeAnthropic, provider: AnthropicProvider
) -> None:
    thinking = {"type": "thinking", "thinking": "the user wants x", "signature": "sig-1"}
    server = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"q": "x"}, "cache": None}
    fake_llm.script(ScriptedReply(content=[thinking, server, {"type": "text", "text": "Found it."}], chunks=2))
    deltas: list[str] = []
    resp = await provider.stream(request(), deltas.append)
    assert "".join(deltas) == "Found it."
    assert resp.content == [
        thinking,
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"q": "x"}},
        {"type": "text", "text": "Found it."},
    ]
    assert resp.message_id.startswith("msg_") and resp.stop_reason == "end_turn"


async def test_usage_is_final_and_keeps_cache_fields(fake_llm: FakeAnthropic, provider: AnthropicProvider) -> None:
    usage = {"input_tokens": 12, "output_tokens": 42, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 7}
    fake_llm.script(reply_text("cached", usage=usage))
    resp = await provider.stream(request())
    assert resp.usage == Usage(12, 42, 100, 7)
    assert resp.usage.prompt_tokens == 119


async def test_cut_stream_has_no_stop_reason(fake_llm: FakeAnthropic, provider: AnthropicProvider) -> None:
    fake_llm.script(cut_stream("half a sen"))
    resp = await provider.stream(request())
    assert resp.text == "half a sen"
    assert resp.stop_reason is None


async def test_429_is_retried_honouring_retry_after(
    fake_llm: FakeAnthropic, provider: AnthropicProvider, sleeps: RecordingSleep
) -> None:
    fake_llm.script(rate_limited(retry_after_ms=1500), reply_text("ok now"))
    resp = await provider.stream(request())
    assert resp.text == "ok now"
    assert len(fake_llm.message_requests()) == 2
    assert sleeps.delays == [1.5]


async def test_529_is_retried_with_backoff(
    fake_llm: FakeAnthropic, provider: AnthropicProvider, sleeps: RecordingSleep
) -> None:
    fake_llm.script(overloaded(), overloaded(), reply_text("finally"))
    resp = await provider.stream(request())
    assert resp.text == "finally"
    assert len(fake_llm.requests) == 3
    assert sleeps.delays == [0.01, 0.02]


async def test_500_gives_up_after_max_retries(
    fake_llm: FakeAnthropic, provider: AnthropicProvider, sleeps: RecordingSleep
) -> None:
    fake_llm.script(server_error(), server_error(), server_error(), reply_text("too late"))
    with pytest.raises(LLMError) as info:
        await provider.stream(request())
    assert len(fake_llm.requests) == 3
    assert info.value.user_text == MSG_BUSY
    assert isinstance(info.value.__cause__, anthropic.InternalServerError)
    assert fake_llm.pending == 1


async def test_x_should_retry_false_is_obeyed(fake_llm: FakeAnthropic, provider: AnthropicProvider) -> None:
    fake_llm.script(http_error(529, "Overloaded", headers={"x-should-retry": "false"}), reply_text("no"))
    with pytest.raises(LLMError):
        await provider.stream(request())
    assert len(fake_llm.requests) == 1


async def test_midstream_error_before_text_is_retried(fake_llm: FakeAnthropic, provider: AnthropicProvider) -> None:
    fake_llm.script(midstream_error(), reply_text("recovered"))
    deltas: list[str] = []
    resp = await provider.stream(request(), deltas.append)
    assert "".join(deltas) == resp.text == "recovered"
    assert len(fake_llm.requests) == 2


async def test_midstream_error_after_text_fails_without_retry(
    fake_llm: FakeAnthropic, provider: AnthropicProvider
) -> None:
    fake_llm.script(midstream_error("The answer is"), reply_text("never sent"))
    deltas: list[str] = []
    with pytest.raises(LLMError) as info:
        await provider.stream(request(), deltas.append)
    assert "".join(deltas) == "The answer is"
    assert info.value.user_text == MSG_INTERRUPTED
    assert len(fake_llm.requests) == 1


async def test_midstream_non_retryable_error_type_is_not_retried(
    fake_llm: FakeAnthropic, provider: AnthropicProvider
) -> None:
    fake_llm.script(midstream_error(error_type="invalid_request_error"), reply_text("no"))
    with pytest.raises(LLMError):
        await provider.stream(request())
    assert len(fake_llm.requests) == 1


async def test_hang_times_out_and_each_attempt_disconnects(fake_llm: FakeAnthropic, sleeps: RecordingSleep) -> None:
    p = make(fake_llm, sleeps, retries=1, timeout_s=0.2)
    fake_llm.script(hang(), hang())
    try:
        with pytest.raises(LLMError) as info:
            await p.stream(request())
    finally:
        await p.aclose()
    assert info.value.user_text == MSG_TIMEOUT
    assert len(fake_llm.requests) == 2
    for rec in fake_llm.requests:
        await asyncio.wait_for(rec.disconnected.wait(), 2)


async def test_prompt_too_long_raises_overflow_without_retry(
    fake_llm: FakeAnthropic, provider: AnthropicProvider
) -> None:
    fake_llm.script(prompt_too_long(208656, 200000), reply_text("no"))
    with pytest.raises(ContextOverflowError) as info:
        await provider.stream(request())
    assert len(fake_llm.requests) == 1
    said = info.value.user_text.render("en")
    assert "208656" not in said and "context window" in said


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        (400, "This model's maximum context length is 131072 tokens", None),
        (400, "Input is too long for requested model.", None),
        (413, "Request exceeds the maximum allowed size", "request_too_large"),
    ],
)
async def test_vendor_overflow_phrasings(
    fake_llm: FakeAnthropic, provider: AnthropicProvider, status: int, message: str, kind: str | None
) -> None:
    fake_llm.script(http_error(status, message, error_type=kind))
    with pytest.raises(ContextOverflowError):
        await provider.stream(request())


async def test_401_is_not_retried_and_hides_the_key(fake_llm: FakeAnthropic, provider: AnthropicProvider) -> None:
    fake_llm.script(http_error(401, f"invalid x-api-key {KEY}"), reply_text("no"))
    with pytest.raises(LLMError) as info:
        await provider.stream(request())
    assert len(fake_llm.requests) == 1
    assert info.value.user_text == MSG_AUTH
    assert all(KEY not in info.value.user_text.render(locale) for locale in i18n.LOCALES) and KEY not in str(info.value)


async def test_404_raises_model_not_found(fake_llm: FakeAnthropic, provider: AnthropicProvider) -> None:
    fake_llm.script(http_error(404, "model: claude-nope"), reply_text("no"))
    with pytest.raises(ModelNotFoundError) as info:
        await provider.stream(request(model="claude-nope"))
    assert info.value.model == "claude-nope"
    assert len(fake_llm.requests) == 1


async def test_cancel_makes_the_server_see_the_disconnect(fake_llm: FakeAnthropic, provider: AnthropicProvider) -> None:
    fake_llm.script(reply_text("x" * 200, chunks=100, delta_delay_s=0.02))
    first = asyncio.Event()
    task = asyncio.create_task(provider.stream(request(), lambda _t: first.set()))
    await asyncio.wait_for(first.wait(), 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    rec = fake_llm.requests[0]
    await asyncio.wait_for(rec.disconnected.wait(), 2)
    assert not rec.completed.is_set()


async def test_cancel_during_backoff_propagates(fake_llm: FakeAnthropic) -> None:
    sleeping = asyncio.Event()

    async def real_sleep(delay: float) -> None:
        sleeping.set()
        await asyncio.sleep(delay)

    endpoint = Endpoint(fake_llm.base_url, KEY, "claude-test", custom_base_url=True)
    policy = RetryPolicy(max_retries=3, base_s=30.0, max_s=30.0)
    p = AnthropicProvider(endpoint, retry=policy, sleep=real_sleep)
    fake_llm.script(overloaded(), reply_text("never"))
    task = asyncio.create_task(p.stream(request()))
    try:
        await asyncio.wait_for(sleeping.wait(), 2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 2)
    finally:
        await p.aclose()
    assert len(fake_llm.requests) == 1


async def test_both_auth_headers_sent_for_a_custom_base_url(
    fake_llm: FakeAnthropic, provider: AnthropicProvider
) -> None:
    await provider.complete(request("ping"))
    headers = fake_llm.requests[0].headers
    assert headers["authorization"] == f"Bearer {KEY}"
    assert headers["x-api-key"] == KEY
    assert "anthropic-version" in headers


async def test_concurrent_calls_run_in_parallel_on_one_client(
    fake_llm: FakeAnthropic, provider: AnthropicProvider
) -> None:
    fake_llm.first_byte_delay_s = 0.1
    results = await asyncio.gather(*(provider.stream(request(f"n{i}")) for i in range(6)))
    assert [r.text for r in results] == [f"reply to: n{i}" for i in range(6)]
    assert fake_llm.max_in_flight == 6


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("Model Not Exist", "invalid_request_error"),  # DeepSeek
        ("Model does not exist. Please check it carefully.", "invalid_request_error"),
        ("The model `deepseek-v9` does not exist", "invalid_request_error"),
        ("invalid model: deepseek-v9", "invalid_request_error"),
        ("not available", "model_not_found"),
        ("模型不存在，请检查模型代码。", "invalid_request_error"),
    ],
)
async def test_a_400_naming_an_unknown_model_raises_model_not_found(
    fake_llm: FakeAnthropic, provider: AnthropicProvider, message: str, kind: str
) -> None:
    fake_llm.script(http_error(400, message, error_type=kind), reply_text("no"))
    with pytest.raises(ModelNotFoundError) as info:
        await provider.stream(request(model="deepseek-v9"))
    assert info.value.model == "deepseek-v9"
    assert len(fake_llm.requests) == 1


async def test_other_400s_stay_plain_errors(fake_llm: FakeAnthropic, provider: AnthropicProvider) -> None:
    fake_llm.script(http_error(400, "messages.0.content: text content blocks must be non-empty"))
    with pytest.raises(LLMError) as info:
        await provider.stream(request())
    assert not isinstance(info.value, ModelNotFoundError | ContextOverflowError)


async def test_complete_streams_and_gives_the_whole_reply(fake_llm: FakeAnthropic, provider: AnthropicProvider) -> None:
    usage = {"input_tokens": 12, "output_tokens": 42, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 7}
    fake_llm.script(reply_tool("get_weather", {"city": "北京"}, text="Let me check.", usage=usage))
    resp = await provider.complete(request())
    assert resp.text == "Let me check." and resp.stop_reason == "tool_use" and resp.model == "claude-test"
    [use] = resp.tool_uses
    assert use["name"] == "get_weather" and use["input"] == {"city": "北京"} and use["id"].startswith("toolu_")
    assert resp.usage == Usage(12, 42, 100, 7)
    [sent] = fake_llm.requests
    assert sent.stream


async def test_both_calls_send_the_request_as_it_is(fake_llm: FakeAnthropic, provider: AnthropicProvider) -> None:
    tool = {"name": "get_weather", "description": "天气", "input_schema": {"type": "object", "properties": {}}}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "hi 你好", "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_weather", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"}]},
    ]
    call = request(messages=messages, tools=[tool], tool_choice={"type": "auto"})
    await provider.stream(call, lambda _: None)
    await provider.complete(call)
    streamed, completed = fake_llm.requests
    expected = {
        "model": "claude-test",
        "max_tokens": 256,
        "system": call.system,
        "messages": messages,
        "tools": [tool],
        "tool_choice": {"type": "auto"},
    }
    assert streamed.body == completed.body == {**expected, "stream": True}
    for sent in (streamed, completed):
        assert sent.headers["x-stainless-helper-method"] == "stream"
        assert sent.headers["x-stainless-stream-helper"] == "messages"
        assert sent.headers["content-type"] == "application/json"


async def test_complete_retries_a_529_then_answers(
    fake_llm: FakeAnthropic, provider: AnthropicProvider, sleeps: RecordingSleep
) -> None:
    fake_llm.script(overloaded(), reply_text("recovered"))
    resp = await provider.complete(request())
    assert resp.text == "recovered"
    assert len(sleeps.delays) == 1 and [r.stream for r in fake_llm.requests] == [True, True]


def test_building_the_providers_does_not_import_the_sdk(tmp_path: Path) -> None:
    """The SDK takes seconds to import (Pillow a quarter second): a start-up with a key configured must not wait
    for them, nor for the MCP SDK when no agent declares a server."""
    code = (
        "import sys\n"
        "import agenthub.hosting.daemon, agenthub.api.server, agenthub.hosting.app\n"
        "from agenthub.config import LLMSettings\n"
        "from agenthub.llm.registry import ProviderRegistry\n"
        "reg = ProviderRegistry.from_settings(LLMSettings(api_key='k', base_url='http://127.0.0.1:9'), env={})\n"
        "assert not reg.is_offline\n"
        "heavy = ('anthropic', 'httpx2', 'PIL', 'mcp')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"  # after the start-up log line naming the endpoint


async def test_a_background_call_to_a_hung_vendor_is_retried_after_the_read_timeout(
    fake_llm: FakeAnthropic, sleeps: RecordingSleep
) -> None:
    """`complete` (summaries, L3, titles) streams like a turn: a vendor that sends nothing for `timeout_s` is cut
    there and retried, not waited for as long as a whole reply of `max_tokens` could take."""
    p = make(fake_llm, sleeps, retries=1, timeout_s=0.2)
    fake_llm.script(reply_text("too late", first_byte_delay_s=3), reply_text("recovered"))
    try:
        resp = await p.complete(request())
    finally:
        await p.aclose()
    assert resp.text == "recovered"
    assert [r.stream for r in fake_llm.requests] == [True, True]


def test_callers_waiting_for_the_sdk_leave_the_default_thread_pool_free(tmp_path: Path) -> None:
    """Every turn of a cold process waits for the SDK's import: the waiters share one import and hold no worker of
    the default thread pool meanwhile, where the inbox's writes run (they used to wait for the whole import)."""
    code = (
        "import asyncio, time\n"
        "from agenthub.llm.anthropic_provider import load_sdk\n"
        "async def main():\n"
        "    loads = [asyncio.create_task(load_sdk()) for _ in range(20)]\n"
        "    await asyncio.sleep(0.05)\n"
        "    began = time.perf_counter()\n"
        "    await asyncio.to_thread(time.sleep, 0)\n"
        "    free = time.perf_counter() - began\n"
        "    modules = {id(m) for m in await asyncio.gather(*loads)}\n"
        "    print(free, time.perf_counter() - began, len(modules))\n"
        "asyncio.run(main())\n"
    )
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    free_s, import_s, distinct = done.stdout.split()
    assert int(distinct) == 1
    assert float(free_s) < 0.5 * float(import_s), (free_s, import_s)  # a pool worker came free long before
