"""Unusual stop reasons end a turn with visible, non-empty text and a history the API accepts on the next turn."""

from __future__ import annotations

from typing import Any

from agenthub import i18n
from agenthub.agent.loop import CUT_NOTES, EMPTY_REPLY, EMPTY_STORED, REFUSAL_NOTE, REFUSAL_TEXT
from agenthub.gateway.core import GatewayCore
from agenthub.messages import DeltaEvent, DoneEvent, InboundMessage, ReplyEvent
from agenthub.session_keys import SessionKey
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, reply_text, reply_tool

KEY = SessionKey("default", "cli", "direct")


async def _turn(gw: GatewayCore, text: str) -> tuple[DoneEvent, str]:
    events: list[ReplyEvent] = [e async for e in await gw.submit(InboundMessage("cli", "direct", "me", text))]
    final = events[-1]
    assert isinstance(final, DoneEvent), final
    return final, "".join(e.text for e in events if isinstance(e, DeltaEvent))


def _texts(body: dict[str, Any]) -> list[str]:
    """Every text block of a request's messages, in order."""
    out = []
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            out.append(content)
        else:
            out += [b["text"] for b in content if b.get("type") == "text"]
    return out


async def test_max_tokens_keeps_the_text_and_says_it_was_cut(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(reply_text("The first half of a long", stop_reason="max_tokens"))
    final, streamed = await _turn(gateway, "write a long essay")
    expected = "The first half of a long\n\n" + i18n.text(CUT_NOTES["max_tokens"], "en")
    assert final.full_text == streamed == expected
    assert (await gateway.history.load(KEY))[-1]["content"] == expected


async def test_max_tokens_inside_a_tool_call_stores_no_unanswered_tool_use(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(reply_tool("write_memory", {"content": "half"}, text="Saving", stop_reason="max_tokens"))
    final, _ = await _turn(gateway, "remember this")
    assert final.full_text == "Saving\n\n" + i18n.text(CUT_NOTES["max_tokens"], "en")
    stored = (await gateway.history.load(KEY))[-1]
    assert stored["role"] == "assistant" and stored["content"] == final.full_text  # text only, no tool_use
    assert not (gateway.settings.data_dir / "default" / "memory" / "MEMORY.md").exists()


async def test_context_window_exceeded_keeps_the_text_and_suggests_compact(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(reply_text("Partial", stop_reason="model_context_window_exceeded"))
    final, streamed = await _turn(gateway, "go on")
    assert final.full_text == streamed == "Partial\n\n" + i18n.text(CUT_NOTES["model_context_window_exceeded"], "en")
    assert "/compact" in final.full_text
    assert len(fake_llm.message_requests()) == 1  # a valid reply, not an error to retry


async def test_refusal_without_text_gives_a_clear_reply_and_the_turn_leaves_the_context(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    await _turn(gateway, "hello")
    fake_llm.script(ScriptedReply(content=[], stop_reason="refusal"))
    final, streamed = await _turn(gateway, "something the model refuses")
    assert final.full_text == streamed == i18n.text(REFUSAL_TEXT, "en")
    history = await gateway.history.load(KEY)
    assert [m["content"] for m in history[-2:]] == ["something the model refuses", i18n.text(REFUSAL_TEXT, "en")]
    assert history[-1]["refusal"] is True
    # the next request leaves the refused turn out (the API keeps refusing otherwise), the rest stays
    await _turn(gateway, "what's the weather")
    body = fake_llm.message_requests()[-1].body or {}
    texts = _texts(body)
    assert not any("refuses" in t for t in texts) and i18n.text(REFUSAL_TEXT, "en") not in texts
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert texts[0].startswith("hello") and texts[-1].startswith("what's the weather")


async def test_refusal_after_some_text_keeps_it_and_adds_a_note(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(reply_text("Sure, here is how", stop_reason="refusal"))
    final, streamed = await _turn(gateway, "how do I")
    assert final.full_text == streamed == "Sure, here is how\n\n" + i18n.text(REFUSAL_NOTE, "en")


async def test_only_tool_calls_then_an_empty_end_turn_gives_a_fallback(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(reply_tool("read_memory", {}), ScriptedReply(content=[], stop_reason="end_turn"))
    final, streamed = await _turn(gateway, "check your memory")
    assert final.full_text == streamed == i18n.text(EMPTY_REPLY, "en")
    assert (await gateway.history.load(KEY))[-1]["content"] == i18n.text(EMPTY_REPLY, "en")


async def test_empty_final_call_after_text_is_stored_non_empty(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(
        reply_tool("read_memory", {}, text="Let me look."),
        ScriptedReply(content=[{"type": "text", "text": ""}], stop_reason="end_turn"),
    )
    final, streamed = await _turn(gateway, "check")
    assert final.full_text == streamed == "Let me look."
    assert (await gateway.history.load(KEY))[-1]["content"] == EMPTY_STORED
    await _turn(gateway, "and?")  # the API rejects empty text blocks: none is sent
    body = fake_llm.message_requests()[-1].body or {}
    assert all(t for t in _texts(body))
    assert EMPTY_STORED in _texts(body)
