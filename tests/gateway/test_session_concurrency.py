"""Per-session state under many writers at once: order per session, sessions in parallel, /stop and /restart
against a held turn, a turn's time limit beside waiting messages, and the two command tiers."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

from agenthub.config import Settings
from agenthub.gateway.commands import CommandContext, CommandTier
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent, ErrorEvent, InboundMessage
from agenthub.session_keys import SessionKey
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, hang, last_user_text, reply_text

SESSIONS = 20
PER_SESSION = 3


def _msg(chat: str, text: str, sender: str = "me") -> InboundMessage:
    return InboundMessage("cli", chat, sender, text)


def _key(chat: str) -> SessionKey:
    return SessionKey("default", "cli", chat)


def _words(body: dict[str, object]) -> str:
    """The request's last user text without the `[time, via channel]` suffix of its (last) message."""
    return last_user_text(body).split("\n\n[")[0]


async def test_twenty_sessions_released_together_keep_their_order_and_run_in_parallel(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    release = asyncio.Event()

    def held_echo(body: dict[str, object]) -> ScriptedReply:
        return reply_text("answer to " + last_user_text(body), hold=release)

    fake_llm.responder = held_echo
    submits = [gateway.submit(_msg(f"c{s}", f"s{s}-m{i}")) for i in range(PER_SESSION) for s in range(SESSIONS)]
    handles = await asyncio.gather(*submits)  # every message of every session arrives at the same moment
    await fake_llm.wait_for_requests(SESSIONS)  # every session's first turn is at the model, none answered
    assert fake_llm.max_in_flight == SESSIONS and not any(h.finished for h in handles)
    release.set()
    finals = await asyncio.gather(*(h.result() for h in handles))
    assert all(isinstance(f, DoneEvent) for f in finals)
    assert len(fake_llm.message_requests()) == 2 * SESSIONS  # the first alone, the two that waited together
    for s in range(SESSIONS):
        history = await gateway.history.load(_key(f"c{s}"))
        assert [(m["role"], m["content"]) for m in history if m["role"] == "user"] == [
            ("user", f"s{s}-m0"),
            ("user", f"s{s}-m1"),
            ("user", f"s{s}-m2"),
        ]
        assert [m["role"] for m in history] == ["user", "assistant", "user", "user", "assistant"]
        first_answer, last_answer = history[1]["content"], history[-1]["content"]
        assert f"s{s}-m0" in first_answer and f"s{s}-m1" not in first_answer  # no cross-talk, no early join
        assert f"s{s}" in last_answer and last_answer.index(f"s{s}-m1") < last_answer.index(f"s{s}-m2")
        assert not gateway.is_busy(_key(f"c{s}"))


async def test_stop_while_a_turn_is_held_ends_it_and_drops_what_the_sender_queued(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    release = asyncio.Event()
    fake_llm.script(reply_text("never seen", hold=release))
    running = await gateway.submit(_msg("c", "first"))
    await fake_llm.wait_for_requests(1)
    queued = await gateway.submit(_msg("c", "second"))
    other = await gateway.submit(_msg("elsewhere", "beside"))  # another session is not touched
    stopped = await (await gateway.submit(_msg("c", "/stop"))).result()
    assert isinstance(stopped, DoneEvent) and "Stopped the running reply" in stopped.full_text
    assert [(await h.result()).code for h in (running, queued)] == ["stopped", "stopped"]  # type: ignore[union-attr]
    release.set()
    assert isinstance(await other.result(), DoneEvent)
    history = await gateway.history.load(_key("c"))
    assert [(m["role"], m["content"]) for m in history] == [("user", "first")]  # kept; the queued one never stored
    state = gateway.sessions.get(_key("c"))
    assert state is not None and state.status == "idle" and not gateway.is_busy(_key("c"))


async def test_restart_while_a_turn_is_held_clears_before_the_message_behind_it(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    release = asyncio.Event()
    fake_llm.script(reply_text("old", hold=release), reply_text("fresh answer"))
    running = await gateway.submit(_msg("c", "old question"))
    await fake_llm.wait_for_requests(1)
    asked = await (await gateway.submit(_msg("c", "/restart"))).result()
    assert isinstance(asked, DoneEvent) and "again within" in asked.full_text and not running.finished
    behind = await gateway.submit(_msg("c", "new question", sender="bob"))  # another member's, behind the turn
    done = await (await gateway.submit(_msg("c", "/restart"))).result()
    assert isinstance(done, DoneEvent) and "starts fresh" in done.full_text
    final = await running.result()
    assert isinstance(final, ErrorEvent) and final.code == "restart"
    answered = await asyncio.wait_for(behind.result(), 5)
    assert isinstance(answered, DoneEvent) and answered.full_text == "fresh answer"
    history = await gateway.history.load(_key("c"))
    assert [(m["role"], m["content"]) for m in history] == [("user", "new question"), ("assistant", "fresh answer")]
    body = fake_llm.message_requests()[1].body
    assert body is not None and len(body["messages"]) == 1  # the model never saw the cleared turn
    release.set()


async def test_a_turn_timing_out_leaves_the_waiting_message_and_other_sessions_running(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory()
    write_agent(settings.agents_dir, "quick", {"lock_timeout_s": 1})  # the other sessions keep the 120 s default
    release = asyncio.Event()

    def reply(body: dict[str, object]) -> ScriptedReply:
        words = _words(body)
        return (
            hang()
            if words == "hangs"
            else reply_text("answer to " + words, hold=release if words == "beside" else None)
        )

    fake_llm.responder = reply
    async with build_gateway(settings) as gw:
        hung = await gw.submit(InboundMessage("cli", "a", "me", "hangs", agent="quick"))
        await fake_llm.wait_for_requests(1)
        waiting = await gw.submit(InboundMessage("cli", "a", "me", "waits", agent="quick"))
        beside = await gw.submit(_msg("b", "beside"))  # held at the model until the end
        timed_out = await asyncio.wait_for(hung.result(), 10)
        assert isinstance(timed_out, ErrorEvent) and timed_out.code == "timeout"
        answered = await asyncio.wait_for(waiting.result(), 5)  # it ran after the timeout, alone
        assert isinstance(answered, DoneEvent) and answered.full_text == "answer to waits"
        assert not beside.finished  # the other session's turn is still in flight, untouched
        release.set()
        assert isinstance(await beside.result(), DoneEvent)
        state = gw.sessions.get(SessionKey("quick", "cli", "a"))
        assert state is not None and state.status == "idle"


async def test_a_queued_command_runs_in_order_between_turns_and_a_priority_one_at_once(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    seen: list[list[str]] = []

    async def mark(ctx: CommandContext) -> str:
        seen.append([str(m["content"]) for m in await gateway.history.load(ctx.key)])
        return "marked"

    gateway.commands.register("mark", "command.help.help", mark, tier=CommandTier.QUEUED)
    release = asyncio.Event()
    fake_llm.script(
        reply_text("a1", hold=release), dataclasses.replace(reply_text("a2")), dataclasses.replace(reply_text("a3"))
    )
    first = await gateway.submit(_msg("c", "m1"))
    await fake_llm.wait_for_requests(1)
    second = await gateway.submit(_msg("c", "m2"))
    marked = await gateway.submit(_msg("c", "/mark"))
    third = await gateway.submit(_msg("c", "m3"))
    status = await (await gateway.submit(_msg("c", "/status"))).result()  # priority: answered while m1 runs
    assert isinstance(status, DoneEvent) and "processing" in status.full_text and not first.finished
    assert seen == []
    release.set()
    finals = [await h.result() for h in (first, second, marked, third)]
    assert [f.full_text for f in finals if isinstance(f, DoneEvent)] == ["a1", "a2", "marked", "a3"]
    assert seen == [["m1", "a1", "m2", "a2"]]  # after the message before it, before the one after it
    assert len(fake_llm.message_requests()) == 3  # the command split the burst: m2 and m3 were not joined
