"""Gateway ordering and parallelism: sessions run in parallel under a global cap, one session runs serially."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

from agenthub import i18n
from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway
from agenthub.messages import DeltaEvent, DoneEvent, InboundMessage, NoticeEvent, ReplyEvent
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, last_user_text, reply_text


def _echo(body: dict[str, object]) -> ScriptedReply:
    """Answer with the user's own words, without the volatile `[time, via channel]` suffix."""
    return reply_text("reply to: " + last_user_text(body).split("\n\n[")[0])


async def _events(handle: object) -> list[ReplyEvent]:
    return [e async for e in handle]  # type: ignore[attr-defined]


async def test_two_sessions_are_in_flight_at_the_model_at_the_same_time(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    release = asyncio.Event()
    fake_llm.responder = lambda body: dataclasses.replace(_echo(body), hold=release)
    handles = [await gateway.submit(InboundMessage("cli", chat, "me", f"hello {chat}")) for chat in ("a", "b")]
    await fake_llm.wait_for_requests(2)  # both reached the model while neither has been answered
    assert fake_llm.max_in_flight == 2 and not any(h.finished for h in handles)
    release.set()
    finals = await asyncio.gather(*(h.result() for h in handles))
    assert [type(f) for f in finals] == [DoneEvent, DoneEvent]
    assert [f.full_text for f in finals if isinstance(f, DoneEvent)] == ["reply to: hello a", "reply to: hello b"]
    assert fake_llm.max_in_flight == 2


async def test_messages_waiting_behind_a_turn_go_to_the_model_together_as_one_turn(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    release = asyncio.Event()
    fake_llm.script(reply_text("first answer", hold=release), reply_text("answer to the rest"))
    handles = [await gateway.submit(InboundMessage("cli", "direct", "me", f"m{i}")) for i in range(5)]
    await fake_llm.wait_for_requests(1)
    release.set()  # the four waiting messages are all queued when the first turn ends
    results = await asyncio.gather(*(_events(h) for h in handles))
    finals = [r[-1] for r in results]
    assert all(isinstance(f, DoneEvent) for f in finals)
    assert [f.full_text for f in finals if isinstance(f, DoneEvent)] == [
        "first answer",
        *[i18n.text("done.answered_together", "en")] * 3,
        "answer to the rest",
    ]
    assert fake_llm.max_in_flight == 1 and len(fake_llm.message_requests()) == 2
    assert not any(isinstance(e, NoticeEvent) for e in results[0])
    assert any(isinstance(e, NoticeEvent) and "Queued behind 4" in e.text for e in results[4])
    assert not any(isinstance(e, DeltaEvent) for r in results[1:4] for e in r)  # the answer streams to the last
    _, key = gateway.resolve_key(InboundMessage("cli", "direct", "me", "x"))
    history = await gateway.history.load(key)
    assert [(m["role"], m["content"]) for m in history] == [
        ("user", "m0"),
        ("assistant", "first answer"),
        *[("user", f"m{i}") for i in range(1, 5)],  # each stored as its own user message
        ("assistant", "answer to the rest"),
    ]
    second = fake_llm.message_requests()[1].body
    assert second is not None
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]  # one request sees all four
    together = last_user_text(second)
    assert [together.index(f"m{i}") for i in range(1, 5)] == sorted(together.index(f"m{i}") for i in range(1, 5))
    assert "interrupted" not in together


async def test_a_burst_of_25_messages_is_answered_not_refused(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    release = asyncio.Event()
    fake_llm.script(reply_text("first", hold=release))
    handles = [await gateway.submit(InboundMessage("cli", "paste", "me", f"line {i}")) for i in range(25)]
    await fake_llm.wait_for_requests(1)
    release.set()
    finals = await asyncio.gather(*(h.result() for h in handles))
    assert [type(f) for f in finals] == [DoneEvent] * 25
    assert len(fake_llm.message_requests()) == 2


async def test_the_global_cap_bounds_concurrent_llm_calls(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    fake_llm.first_byte_delay_s = 0.05
    settings = settings_factory(session={"max_concurrent_llm": 2})
    async with build_gateway(settings) as gw:
        handles = [await gw.submit(InboundMessage("cli", f"chat{i}", "me", "hi")) for i in range(6)]
        finals = await asyncio.gather(*(h.result() for h in handles))
    assert all(isinstance(f, DoneEvent) for f in finals)
    assert fake_llm.max_in_flight == 2
    assert len(fake_llm.message_requests()) == 6


async def test_user_message_is_stored_before_the_call_and_reply_after(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    fake_llm.first_byte_delay_s = 0.3
    message = InboundMessage("cli", "direct", "me", "remember me", message_id="mid-1")
    handle = await gateway.submit(message)
    await fake_llm.wait_for_requests(1)
    _, key = gateway.resolve_key(message)
    during = await gateway.history.load(key)
    assert [(m["role"], m["content"]) for m in during] == [("user", "remember me")]
    assert during[0]["message_id"] == "mid-1" and during[0]["channel"] == "cli"
    session = gateway.sessions.get(key)
    assert session is not None and session.status == "processing" and session.current is not None
    assert session.current.message_id == "mid-1" and gateway.is_busy(key)
    await handle.result()
    after = await gateway.history.load(key)
    assert [m["role"] for m in after] == ["user", "assistant"]
    assert session.current is None and session.status == "idle" and not gateway.is_busy(key)


async def test_different_sessions_keep_separate_histories(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(reply_text("for a"), reply_text("for b"))
    first = await gateway.submit(InboundMessage("cli", "a", "me", "one"))
    assert isinstance(await first.result(), DoneEvent)
    second = await gateway.submit(InboundMessage("wecom", "b", "me", "two"))
    assert isinstance(await second.result(), DoneEvent)
    key_a = gateway.resolve_key(InboundMessage("cli", "a", "me", "x"))[1]
    key_b = gateway.resolve_key(InboundMessage("wecom", "b", "me", "x"))[1]
    assert str(key_a) == "default:cli:a" and str(key_b) == "default:wecom:b"
    assert [m["content"] for m in await gateway.history.load(key_a)] == ["one", "for a"]
    assert [m["content"] for m in await gateway.history.load(key_b)] == ["two", "for b"]
    second_request = fake_llm.message_requests()[1].body
    assert second_request is not None and len(second_request["messages"]) == 1
