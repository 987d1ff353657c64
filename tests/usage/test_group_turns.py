"""A group chat's turn that joins several senders' messages: every sender's budget is checked before it, and its
usage is charged to them in equal shares (the chat's, agent's and model's totals stay the call's)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.gateway.handle import ReplyHandle
from agenthub.hosting.app import build_gateway
from agenthub.messages import SENDER_NAME, DoneEvent, ErrorEvent, InboundMessage, ReplyEvent
from agenthub.storage.usage import Scope, UsageRow
from agenthub.usage.recorder import split
from agenthub.usage.report import totals
from tests.support.fakes.anthropic import FakeAnthropic, reply_text

PER_CALL = {"input_tokens": 200, "output_tokens": 100}


async def joined_behind_a_held_turn(
    gw: GatewayCore, fake: FakeAnthropic, senders: list[str]
) -> tuple[ReplyEvent, list[ReplyEvent]]:
    """carol's turn holds the model while `senders` write to the group; their messages go as one turn after it."""
    release = asyncio.Event()
    fake.script(reply_text("to carol", hold=release), reply_text("to you all"))
    first = await gw.submit(InboundMessage("wecom", "g", "carol", "carol asks"))
    await fake.wait_for_requests(len(fake.message_requests()) + 1)
    handles: list[ReplyHandle] = [await gw.submit(InboundMessage("wecom", "g", s, f"{s} asks")) for s in senders]
    release.set()
    return await first.result(), list(await asyncio.gather(*(h.result() for h in handles)))


async def rows_of(gw: GatewayCore) -> list[UsageRow]:
    assert gw.turn_services.usage is not None
    await gw.turn_services.usage.gate.drain()
    await gw.turn_services.usage.recorder.flush()
    return await gw.turn_services.usage.store.days("2000-01-01", "2100-01-01")


async def test_a_joined_turn_with_one_sender_over_budget_is_refused_naming_them(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory(budgets={"user_day": 300}, llm={"max_tokens": 100})
    fake_llm.default_usage = PER_CALL
    async with build_gateway(settings) as gw:
        bob_first = await (await gw.submit(InboundMessage("wecom", "g", "bob", "bob spends his day"))).result()
        assert isinstance(bob_first, DoneEvent)
        await rows_of(gw)
        before = len(fake_llm.message_requests())
        carol, (alice, bob) = await joined_behind_a_held_turn(gw, fake_llm, ["alice", "bob"])
        rows = await rows_of(gw)
    assert isinstance(carol, DoneEvent)
    assert len(fake_llm.message_requests()) == before + 1  # carol's turn only: the joined one never reached the model
    for final in (alice, bob):
        assert isinstance(final, ErrorEvent) and final.code == "budget_exceeded"
        assert "bob 的每日用量额度（300 tokens）已用完" in final.message and "你的" not in final.message
    assert totals(rows, Scope("user", "wecom", "alice"), "2000-01-01", {}).tokens == 0


async def test_a_joined_turns_usage_is_split_among_its_senders(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory(budgets={"user_day": 10_000})
    fake_llm.default_usage = PER_CALL
    async with build_gateway(settings) as gw:
        carol, (alice, bob) = await joined_behind_a_held_turn(gw, fake_llm, ["alice", "bob"])
        rows = await rows_of(gw)
    assert isinstance(carol, DoneEvent) and isinstance(alice, DoneEvent) and isinstance(bob, DoneEvent)

    def used(who: str) -> int:
        return totals(rows, Scope("user", "wecom", who), "2000-01-01", {}).tokens

    call = 200 + 100
    assert (used("carol"), used("alice"), used("bob")) == (call, call // 2, call // 2)
    assert totals(rows, Scope("chat", "wecom", "g"), "2000-01-01", {}).tokens == 2 * call
    assert sum(r.calls for r in rows) == 2  # two model calls, whoever they are charged to


def test_a_split_keeps_every_token_and_gives_the_rest_to_the_newest_sender() -> None:
    row = UsageRow("2026-12-03", "turn", "a", "wecom", "g", "newest", "m", 10, 7, 5, 1, calls=1, estimated=1)
    rows = split(row, ("x", "y", "newest"))
    assert [r.sender_id for r in rows] == ["x", "y", "newest"]
    assert [(r.input, r.output, r.cache_read, r.cache_write) for r in rows] == [
        (3, 2, 1, 0),
        (3, 2, 1, 0),
        (4, 3, 3, 1),
    ]
    assert [(r.calls, r.estimated) for r in rows] == [(0, 0), (0, 0), (1, 1)]
    assert split(row, ()) == [row] and split(row, ("newest",)) == [row]


@pytest.mark.parametrize(
    ("locale", "expected"),
    [
        ("zh-CN", "王小明 的每日用量额度（300 tokens）已用完"),
        ("en", "王小明's daily usage budget (300 tokens) is used up"),
    ],
)
async def test_a_joined_turns_refusal_names_the_member_by_the_display_name_their_channel_gave(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, locale: str, expected: str
) -> None:
    settings = settings_factory(budgets={"user_day": 300}, llm={"max_tokens": 100})
    fake_llm.default_usage = PER_CALL
    named = {SENDER_NAME: "王小明", "locale": locale}
    async with build_gateway(settings) as gw:
        bob_first = await (await gw.submit(InboundMessage("wecom", "g", "bob", "bob spends his day"))).result()
        assert isinstance(bob_first, DoneEvent)
        await rows_of(gw)
        release = asyncio.Event()
        fake_llm.script(reply_text("to carol", hold=release))
        first = await gw.submit(InboundMessage("wecom", "g", "carol", "carol asks"))
        await fake_llm.wait_for_requests(len(fake_llm.message_requests()) + 1)
        alice = await gw.submit(InboundMessage("wecom", "g", "alice", "alice asks", metadata={"locale": locale}))
        bob = await gw.submit(InboundMessage("wecom", "g", "bob", "bob asks", metadata=named))
        release.set()
        await first.result()
        finals = [await alice.result(), await bob.result()]
    for final in finals:
        assert isinstance(final, ErrorEvent) and final.code == "budget_exceeded"
        assert expected in final.message and "bob" not in final.message
