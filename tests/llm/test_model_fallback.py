"""A hinted model the vendor rejects with DeepSeek's 400 "Model Not Exist" falls back to the agent's model."""

from __future__ import annotations

from agenthub.gateway.core import GatewayCore
from agenthub.messages import DoneEvent, InboundMessage, NoticeEvent, ReplyEvent
from tests.support.fakes.anthropic import FakeAnthropic, http_error, reply_text


async def test_deepseek_400_model_not_exist_falls_back_with_a_notice(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(http_error(400, "Model Not Exist"), reply_text("answered by default"))
    message = InboundMessage("cli", "direct", "me", "hi", model_hint="deepseek-v9-pro")
    events: list[ReplyEvent] = [e async for e in await gateway.submit(message)]
    final = events[-1]
    assert isinstance(final, DoneEvent) and final.full_text == "answered by default"
    notices = [e.text for e in events if isinstance(e, NoticeEvent)]
    assert any("deepseek-v9-pro" in n and gateway.settings.llm.model in n for n in notices)
    models = [r.body["model"] for r in fake_llm.message_requests() if r.body]
    assert models == ["deepseek-v9-pro", gateway.settings.llm.model]
