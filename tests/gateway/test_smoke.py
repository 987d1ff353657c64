"""Smoke: one message through the gateway and the real SDK to the fake LLM."""

from agenthub.gateway.core import GatewayCore
from agenthub.messages import DeltaEvent, DoneEvent, InboundMessage
from tests.support.fakes.anthropic import FakeAnthropic, reply_text


async def test_one_turn_streams_and_stores(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(reply_text("你好，世界 hello"))
    handle = await gateway.submit(InboundMessage("cli", "direct", "me", "hi there"))
    events = [e async for e in handle]
    assert isinstance(events[-1], DoneEvent)
    deltas = [e.text for e in events if isinstance(e, DeltaEvent)]
    assert len(deltas) >= 2
    assert "".join(deltas) == events[-1].full_text == "你好，世界 hello"
    history = await gateway.history.load(gateway.resolve_key(InboundMessage("cli", "direct", "me", "x"))[1])
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert history[1]["content"] == "你好，世界 hello"
