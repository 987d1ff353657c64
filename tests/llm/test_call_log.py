"""Every model call, turn or background, is logged once as `llm_call` with its purpose and counted in the stats."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from structlog.testing import capture_logs

from agenthub.config import Settings
from agenthub.hosting.app import build_gateway
from agenthub.llm import LLMRequest, OfflineProvider
from agenthub.llm.calllog import CallLog
from agenthub.memory.wiring import L3_TIMER
from agenthub.messages import DoneEvent, Usage
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, reply_text, reply_tool
from tests.support.memory import is_l3_request, is_summary_request, msg, seed, settle


def _responder(body: dict[str, Any]) -> ScriptedReply | None:
    if is_summary_request(body):
        return reply_text("用户在做项目 X。")
    if is_l3_request(body):
        return reply_text("- a durable fact")
    return None


async def test_turn_and_background_calls_are_logged_with_their_purpose(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    fake_llm.responder = _responder
    async with build_gateway(settings_factory()) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 25)
        with capture_logs() as logs:
            fake_llm.script(reply_tool("read_memory", {}), reply_text("hello"))
            assert isinstance(await (await gw.submit(msg("hi"))).result(), DoneEvent)
            await settle(gw, key)
            compacted = await (await gw.submit(msg("/compact"))).result()  # memory flush, then the summary
            assert isinstance(compacted, DoneEvent), compacted
            await gw.timers[L3_TIMER].tick_now()
        calls = [e for e in logs if e["event"] == "llm_call"]
        assert [c["purpose"] for c in calls] == ["turn", "turn", "flush", "summary", "l3", "l3"]
        assert len(calls) == len(fake_llm.message_requests())
        assert all(c["provider"] == "default" and c["stop_reason"] == "end_turn" for c in calls[2:])
        assert all(isinstance(c["input_tokens"], int) and c["seconds"] >= 0 for c in calls)
        assert gw.stats.llm_calls == len(calls)
        assert gw.stats.tokens.input_tokens == sum(c["input_tokens"] for c in calls)


async def test_a_provider_alone_logs_and_tells_its_observers() -> None:
    seen: list[tuple[float, Usage]] = []
    log = CallLog()
    log.observe(lambda seconds, usage: seen.append((seconds, usage)))
    provider = OfflineProvider(name="offline", call_log=log)
    request = LLMRequest("m", [], [{"role": "user", "content": "hi"}], [], 10, purpose="title")
    with capture_logs() as logs:
        response = await provider.complete(request)
    [call] = [e for e in logs if e["event"] == "llm_call"]
    assert call["purpose"] == "title" and call["model"] == "m" and call["output_tokens"] > 0
    assert [usage for _, usage in seen] == [response.usage]


async def test_a_failing_observer_neither_fails_nor_repeats_the_call(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    def broken(seconds: float, usage: Usage) -> None:
        raise RuntimeError("counter broke")

    fake_llm.script(reply_text("answer once"))
    async with build_gateway(settings_factory()) as gw:
        gw.providers.call_log.observe(broken)
        with capture_logs() as logs:
            final = await (await gw.submit(msg("hi"))).result()
    assert isinstance(final, DoneEvent) and final.full_text == "answer once"
    assert len(fake_llm.message_requests()) == 1
    assert [e["event"] for e in logs].count("llm_call_observer_failed") == 1
