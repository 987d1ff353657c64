"""Slash commands (design §6): /restart's double confirm, /stop, /status, /help, and what is not a command."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest_asyncio

from agenthub import i18n
from agenthub.clock import ManualClock
from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent, ErrorEvent, InboundMessage, NoticeEvent
from agenthub.session_keys import SessionKey
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, last_user_text, reply_text

KEY = SessionKey("default", "cli", "direct")
OTHER = SessionKey("default", "cli", "other")


def _msg(text: str, chat: str = "direct", **kw: Any) -> InboundMessage:
    return InboundMessage("cli", chat, "me", text, **kw)


def _slow(text: str = "slow answer") -> ScriptedReply:
    return reply_text(text, first_byte_delay_s=30)


async def _say(gw: GatewayCore, text: str, chat: str = "direct") -> DoneEvent | ErrorEvent:
    return await (await gw.submit(_msg(text, chat))).result()


async def _command(gw: GatewayCore, text: str, chat: str = "direct") -> str:
    final = await _say(gw, text, chat)
    assert isinstance(final, DoneEvent), final
    return final.full_text


@pytest_asyncio.fixture
async def clock_gw(settings: Settings) -> AsyncIterator[tuple[GatewayCore, ManualClock]]:
    clock = ManualClock()
    async with build_gateway(settings, clock=clock) as gw:
        yield gw, clock


async def test_restart_double_confirm_aborts_clears_and_spares_others(
    clock_gw: tuple[GatewayCore, ManualClock], fake_llm: FakeAnthropic
) -> None:
    gw, clock = clock_gw
    assert isinstance(await _say(gw, "keep me", chat="other"), DoneEvent)
    assert isinstance(await _say(gw, "first question"), DoneEvent)
    memory = gw.settings.data_dir / "default" / "memory" / "MEMORY.md"
    memory.parent.mkdir(parents=True, exist_ok=True)
    memory.write_text("- likes tea\n", encoding="utf-8")
    other_before = await gw.history.load(OTHER)
    layout = gw.history.layout("default")

    fake_llm.script(_slow())
    slow = await gw.submit(_msg("a slow one"))
    request = (await fake_llm.wait_for_requests(3))[2]

    prompt = await _command(gw, "/restart")
    assert "/restart again within 30 seconds" in prompt
    assert not slow.finished and not request.was_disconnected

    clock.advance(10)
    done = await _command(gw, "/restart")
    assert "starts fresh" in done
    final = await asyncio.wait_for(slow.result(), 2)
    assert isinstance(final, ErrorEvent) and final.code == "restart"
    await asyncio.wait_for(request.disconnected.wait(), 2)
    assert not layout.history_file(KEY).exists()
    assert layout.meta_file(KEY).exists()
    meta = await gw.history.get_meta(KEY)
    assert meta is not None and meta.title == "first question"
    assert await gw.history.load(KEY) == []
    assert await gw.history.load(OTHER) == other_before
    gw.history.evict(OTHER)
    assert await gw.history.load(OTHER) == other_before  # on disk too
    assert memory.read_text(encoding="utf-8") == "- likes tea\n"

    # the session goes on from empty
    fake_llm.script(reply_text("fresh"))
    assert isinstance(await _say(gw, "hello again"), DoneEvent)
    last = fake_llm.message_requests()[-1].body
    assert last is not None and len(last["messages"]) == 1


async def test_restart_after_the_window_prompts_again(
    clock_gw: tuple[GatewayCore, ManualClock], fake_llm: FakeAnthropic
) -> None:
    gw, clock = clock_gw
    assert isinstance(await _say(gw, "something"), DoneEvent)
    assert "again within" in await _command(gw, "/restart")
    clock.advance(31)
    assert "again within" in await _command(gw, "/restart")
    assert len(await gw.history.load(KEY)) == 2
    clock.advance(29)
    assert "starts fresh" in await _command(gw, "/restart")
    assert await gw.history.load(KEY) == []


async def test_restart_confirmation_is_per_session(
    clock_gw: tuple[GatewayCore, ManualClock], fake_llm: FakeAnthropic
) -> None:
    gw, _ = clock_gw
    assert isinstance(await _say(gw, "mine"), DoneEvent)
    assert "again within" in await _command(gw, "/restart", chat="other")
    assert "again within" in await _command(gw, "/restart")
    assert len(await gw.history.load(KEY)) == 2


async def test_restart_with_a_queued_message_clears_before_the_queued_turn(
    clock_gw: tuple[GatewayCore, ManualClock], fake_llm: FakeAnthropic
) -> None:
    gw, _ = clock_gw
    fake_llm.script(_slow(), reply_text("queued answered"))
    slow = await gw.submit(_msg("slow"))
    queued = await gw.submit(_msg("queued"))
    await fake_llm.wait_for_requests(1)
    await _command(gw, "/restart")
    assert "starts fresh" in await _command(gw, "/restart")
    assert isinstance(await slow.result(), ErrorEvent)
    final = await asyncio.wait_for(queued.result(), 2)
    assert isinstance(final, DoneEvent) and final.full_text == "queued answered"
    history = await gw.history.load(KEY)
    assert [(m["role"], m["content"]) for m in history] == [("user", "queued"), ("assistant", "queued answered")]


async def test_stop_aborts_the_running_turn_and_keeps_history(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    assert isinstance(await _say(gateway, "earlier"), DoneEvent)
    fake_llm.script(_slow())
    slow = await gateway.submit(_msg("slow"))
    request = (await fake_llm.wait_for_requests(2))[1]
    assert "Stopped the running reply" in await _command(gateway, "/stop")
    final = await slow.result()
    assert isinstance(final, ErrorEvent) and final.code == "stopped"
    await asyncio.wait_for(request.disconnected.wait(), 2)
    history = await gateway.history.load(KEY)
    assert [(m["role"], m["content"]) for m in history if m["role"] == "user"] == [
        ("user", "earlier"),
        ("user", "slow"),
    ]
    assert [m["role"] for m in history] == ["user", "assistant", "user"]
    assert "Nothing is running" in await _command(gateway, "/stop")


async def test_status_reports_state_size_and_last_usage(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(reply_text("ok", usage={"input_tokens": 11, "output_tokens": 7, "cache_read_input_tokens": 900}))
    assert isinstance(await _say(gateway, "hello"), DoneEvent)
    status = await _command(gateway, "/status")
    assert "agent: default" in status and "session: default:cli:direct" in status
    assert "state: idle" in status and "messages: 2" in status
    assert "11 input, 900 cached, 7 output tokens" in status

    fake_llm.script(_slow())
    await gateway.submit(_msg("busy now"))
    await fake_llm.wait_for_requests(2)
    busy = await _command(gateway, "/status")
    assert "state: processing" in busy and "1 message(s) in progress" in busy


async def test_help_lists_the_commands(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    text = await _command(gateway, "/help")
    for name in ("/restart", "/stop", "/status", "/help"):
        assert name in text
    assert fake_llm.requests == []
    assert await gateway.history.load(KEY) == []  # commands are not stored


async def test_only_registered_words_are_commands(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    for text in ("/unknown thing", "please /restart", "/ restart", "/restart!", "//help", "/usr/bin/env"):
        final = await _say(gateway, text)
        assert isinstance(final, DoneEvent) and final.full_text.startswith("reply to: " + text), text
    assert len(fake_llm.message_requests()) == 6
    assert "again within" in await _command(gateway, "  /RESTART  ")
    assert "again within" not in await _command(gateway, "/Help me")


async def test_commands_answer_while_a_turn_runs(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(_slow())
    slow = await gateway.submit(_msg("slow"))
    await fake_llm.wait_for_requests(1)
    assert "Commands:" in await asyncio.wait_for(_command(gateway, "/help"), 1)
    assert not slow.finished


async def test_commands_are_per_agent_session(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    from tests.support.agents import write_agent

    settings = settings_factory()
    write_agent(settings.agents_dir, "reviewer")
    async with build_gateway(settings) as gw:
        assert isinstance(await (await gw.submit(_msg("x", agent="reviewer"))).result(), DoneEvent)
        status = await (await gw.submit(_msg("/status", agent="reviewer"))).result()
        assert isinstance(status, DoneEvent) and "agent: reviewer" in status.full_text
        assert "session: reviewer:cli:direct" in status.full_text


async def test_restart_waits_for_after_turn_work_before_clearing(
    clock_gw: tuple[GatewayCore, ManualClock], fake_llm: FakeAnthropic
) -> None:
    gw, _ = clock_gw
    hook_done = asyncio.Event()

    async def consolidate(pending: Any, outcome: Any) -> None:  # like L2: rewrites history after a turn
        await asyncio.sleep(0.05)
        old = await gw.history.load(pending.key)
        await gw.history.replace(pending.key, [{"role": "system", "content": "[历史摘要] summary"}, *old])
        hook_done.set()

    gw.after_turn_hooks.append(consolidate)
    fake_llm.script(_slow())
    slow = await gw.submit(_msg("slow"))
    await fake_llm.wait_for_requests(1)
    await _command(gw, "/restart")
    assert "starts fresh" in await _command(gw, "/restart")
    assert isinstance(await slow.result(), ErrorEvent)
    await asyncio.wait_for(hook_done.wait(), 2)
    assert await gw.history.load(KEY) == []


def _zh(key: str, **params: object) -> str:
    """A catalogue text as a WeCom chat (zh-CN by default) reads it."""
    return i18n.text(key, "zh-CN", **params)


async def test_in_a_shared_session_only_the_asker_can_stop_the_reply(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(_slow(), reply_text("done"))
    slow = await gateway.submit(InboundMessage("wecom", "group-1", "alice", "a long question"))
    request = (await fake_llm.wait_for_requests(1))[0]
    refused = await (await gateway.submit(InboundMessage("wecom", "group-1", "bob", "/stop"))).result()
    assert isinstance(refused, DoneEvent) and refused.full_text == _zh("command.stop.not_yours")
    assert not slow.finished and not request.disconnected.is_set()
    stopped = await (await gateway.submit(InboundMessage("wecom", "group-1", "alice", "/stop"))).result()
    assert isinstance(stopped, DoneEvent) and _zh("command.stop.stopped") in stopped.full_text
    final = await slow.result()
    assert isinstance(final, ErrorEvent) and final.code == "stopped"


async def test_stop_also_drops_the_askers_queued_messages_but_not_other_members(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(_slow(), reply_text("for bob"))
    running = await gateway.submit(InboundMessage("wecom", "group-1", "alice", "a long question"))
    await fake_llm.wait_for_requests(1)
    alice_more = [await gateway.submit(InboundMessage("wecom", "group-1", "alice", f"and {i}")) for i in range(2)]
    bob = await gateway.submit(InboundMessage("wecom", "group-1", "bob", "my own question"))
    stopped = await (await gateway.submit(InboundMessage("wecom", "group-1", "alice", "/stop"))).result()
    assert isinstance(stopped, DoneEvent)
    assert (
        _zh("command.stop.stopped") in stopped.full_text and _zh("command.stop.dropped", count=2) in stopped.full_text
    )
    for handle in (running, *alice_more):
        final = await handle.result()
        assert isinstance(final, ErrorEvent) and final.code == "stopped"
    answered = await bob.result()
    assert isinstance(answered, DoneEvent) and answered.full_text == "for bob"
    sent = [last_user_text(r.body or {}) for r in fake_llm.message_requests()]
    assert "and 0" not in " ".join(sent) and "and 1" not in " ".join(sent)  # the dropped ones never reached the model
    history = await gateway.history.load(SessionKey("default", "wecom", "group-1"))
    assert [m["content"] for m in history if m["role"] == "user"] == ["a long question", "my own question"]


async def test_in_a_group_the_confirming_restart_must_come_from_the_sender_who_was_asked(
    clock_gw: tuple[GatewayCore, ManualClock], fake_llm: FakeAnthropic
) -> None:
    gw, _ = clock_gw
    group = SessionKey("default", "wecom", "group-1")

    async def restart_by(sender: str) -> str:
        final = await (await gw.submit(InboundMessage("wecom", "group-1", sender, "/restart"))).result()
        assert isinstance(final, DoneEvent)
        return final.full_text

    assert isinstance(await (await gw.submit(InboundMessage("wecom", "group-1", "alice", "hi"))).result(), DoneEvent)
    confirm = _zh("command.restart.confirm", seconds=int(gw.settings.session.restart_confirm_s))
    assert await restart_by("alice") == confirm
    assert await restart_by("bob") == confirm  # Bob is asked himself; nothing is cleared
    assert len(await gw.history.load(group)) == 2
    assert await restart_by("alice") == _zh("command.restart.done")
    assert await gw.history.load(group) == []
    assert await restart_by("bob") == _zh("command.restart.done")  # Bob's own prompt is still open


async def test_stop_leaves_the_session_idle(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    fake_llm.script(_slow())
    slow = await gateway.submit(_msg("slow"))
    await fake_llm.wait_for_requests(1)
    assert "Stopped the running reply" in await _command(gateway, "/stop")
    assert isinstance(await slow.result(), ErrorEvent)
    session = gateway.sessions.get(KEY)
    assert session is not None and session.status == "idle"
    assert "state: idle" in await _command(gateway, "/status")


async def test_right_after_a_reply_the_chat_is_free(gateway: GatewayCore, fake_llm: FakeAnthropic) -> None:
    """A message or /compact sent the moment a reply is done neither queues behind it nor finds the chat busy."""
    first = await gateway.submit(_msg("first"))
    follow_up: list[Any] = []
    async for event in first:
        if isinstance(event, DoneEvent):  # sent from inside the consumer, before anything else can run
            follow_up.append(await gateway.submit(_msg("/compact")))
            follow_up.append(await gateway.submit(_msg("second")))
    events = [e async for e in follow_up[1]]
    assert not [e for e in events if isinstance(e, NoticeEvent)], events
    compact = await follow_up[0].result()
    assert isinstance(compact, DoneEvent) and "busy" not in compact.full_text


async def test_a_turn_that_also_answers_another_member_cannot_be_stopped_by_one_of_them(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    release = asyncio.Event()
    fake_llm.script(reply_text("first", hold=release), _slow())
    first = await gateway.submit(InboundMessage("wecom", "group-1", "alice", "a question"))
    await fake_llm.wait_for_requests(1)
    alice = await gateway.submit(InboundMessage("wecom", "group-1", "alice", "and one more thing"))
    bob = await gateway.submit(InboundMessage("wecom", "group-1", "bob", "me too"))
    release.set()
    assert isinstance(await first.result(), DoneEvent)
    await fake_llm.wait_for_requests(2)  # alice's and bob's messages now run as one turn
    refused = await (await gateway.submit(InboundMessage("wecom", "group-1", "alice", "/stop"))).result()
    assert isinstance(refused, DoneEvent) and refused.full_text == _zh("command.stop.not_yours")
    assert not alice.finished and not bob.finished
    stopped = await (await gateway.submit(InboundMessage("wecom", "group-1", "bob", "/stop"))).result()
    assert isinstance(stopped, DoneEvent) and stopped.full_text == _zh("command.stop.not_yours")
    gateway.abort(SessionKey("default", "wecom", "group-1"))
    assert [type(await h.result()) for h in (alice, bob)] == [ErrorEvent, ErrorEvent]
