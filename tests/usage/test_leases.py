"""Budget leases: a person's turns far from a limit are admitted from one lease (one store call for several turns);
near the limit every turn reserves for itself, and concurrent turns still overspend by at most one reservation."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from agenthub.config import Settings
from agenthub.hosting.app import build_gateway
from agenthub.llm.tokens import estimate_text_tokens
from agenthub.messages import DoneEvent, ErrorEvent, InboundMessage
from agenthub.storage.usage import UsageRow
from agenthub.usage.periods import day_of
from tests.support.budgets import MAX_TOKENS, PER_CALL, counted_stores, settle_all, store_of, used_by
from tests.support.fakes.anthropic import FakeAnthropic, reply_text


@pytest.mark.parametrize("backend", ["files", "postgres"])
async def test_a_persons_turns_far_from_the_limit_share_one_store_call(
    backend: str, settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, request: pytest.FixtureRequest
) -> None:
    settings = settings_factory(
        budgets={"user_day": 10**9}, llm={"max_tokens": MAX_TOKENS}, store=store_of(backend, request)
    )
    stores, counted = await counted_stores(settings)
    try:
        async with build_gateway(settings, stores=stores) as gw:
            for n in range(8):
                final = await (await gw.submit(InboundMessage("wecom", "dm", "alice", f"question {n}"))).result()
                assert isinstance(final, DoneEvent)
            assert await used_by(gw, "alice") > 0
    finally:
        await stores.aclose()
    assert (
        counted.reserves + counted.rides <= 2
    )  # a lease holds 8 estimates of the first turn; later prompts are larger


@pytest.mark.parametrize("backend", ["files", "postgres"])
async def test_leases_near_the_limit_still_overspend_by_at_most_one_reservation(
    backend: str, settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, request: pytest.FixtureRequest
) -> None:
    limit = 8000  # room for leases at first (8 turns' estimates, at most half of what is left), none near the end
    settings = settings_factory(
        budgets={"user_day": limit}, llm={"max_tokens": MAX_TOKENS}, store=store_of(backend, request)
    )
    fake_llm.default_usage = PER_CALL
    stores, counted = await counted_stores(settings)
    asked = 0
    try:
        async with build_gateway(settings, stores=stores) as gw:
            for wave in range(40):  # until a whole wave is refused: the limit is reached, nothing reserved
                hold = asyncio.Event()
                fake_llm.responder = lambda body, hold=hold: reply_text("ok", hold=hold)
                handles = [
                    await gw.submit(InboundMessage("wecom", f"chat-{wave}-{n}", "alice", f"question {n}"))
                    for n in range(12)
                ]
                finals = await settle_all(handles, fake_llm, hold)
                answered = sum(isinstance(f, DoneEvent) for f in finals)
                refused = sum(isinstance(f, ErrorEvent) and f.code == "budget_exceeded" for f in finals)
                assert answered + refused == 12
                asked += 12
                assert gw.turn_services.usage is not None
                await gw.turn_services.usage.gate.drain()
                if not answered:
                    break
            else:
                pytest.fail("the limit was never reached")
            used = await used_by(gw, "alice")
    finally:
        await stores.aclose()
    reservation = MAX_TOKENS + 1 + estimate_text_tokens("question 11")
    assert limit <= used <= limit + reservation
    assert counted.reserves < asked  # leases admitted some turns without a call of their own


@pytest.mark.parametrize("backend", ["files", "postgres"])
async def test_a_leases_turns_that_overrun_their_estimates_spend_no_more_than_per_turn_reservations_would(
    backend: str, settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, request: pytest.FixtureRequest
) -> None:
    limit = 8000
    settings = settings_factory(
        budgets={"user_day": limit}, llm={"max_tokens": MAX_TOKENS}, store=store_of(backend, request)
    )
    spend = {"input_tokens": 2000, "output_tokens": 50}  # a turn with tool steps: many times its estimate
    fake_llm.default_usage = spend
    stores, counted = await counted_stores(settings)
    try:
        async with build_gateway(settings, stores=stores) as gw:
            for n in range(12):  # one at a time: only what the lease knows of its turns can stop them
                final = await (await gw.submit(InboundMessage("wecom", "dm", "alice", f"question {n}"))).result()
                if isinstance(final, ErrorEvent):
                    assert final.code == "budget_exceeded"
                    break
            else:
                pytest.fail("the limit was never reached")
            used = await used_by(gw, "alice")
    finally:
        await stores.aclose()
    assert counted.reserves >= 1
    assert limit <= used <= limit + sum(spend.values())  # over by at most the one turn admitted below the limit


@pytest.mark.parametrize("backend", ["files", "postgres"])
async def test_a_chats_turns_on_one_instance_share_its_lease_and_its_limit_still_holds(
    backend: str, settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, request: pytest.FixtureRequest
) -> None:
    """alice's turn leases her own scope and the chat's (one store call); bob, in the same group near its chat
    limit, is admitted from this instance's lease of the chat, not refused because of what alice may still spend;
    once the lease ends (after `LEASE_ADMIT_S`; here closed) the chat's usage refuses carol."""
    limit = 10_000
    settings = settings_factory(
        budgets={"user_day": 10**9, "chat_day": limit}, llm={"max_tokens": MAX_TOKENS}, store=store_of(backend, request)
    )
    fake_llm.default_usage = PER_CALL
    stores, counted = await counted_stores(settings)
    try:
        async with build_gateway(settings, stores=stores) as gw:
            assert gw.turn_services.usage is not None
            gate = gw.turn_services.usage.gate
            alice = await (await gw.submit(InboundMessage("wecom", "g", "alice", "question"))).result()
            assert isinstance(alice, DoneEvent)
            calls = (counted.reserves, counted.rides)  # PostgreSQL: riding in the claim of her session
            assert (gate.leases.granted_count, calls) == (2, (1, 0) if backend == "files" else (0, 1))  # one call
            await gate.drain()
            used = await used_by(gw, "alice")
            day = day_of(gw.clock(), gw.turn_services.usage.zone)
            room = 100  # the chat's usage stops this far below its limit: bob's turn is still allowed
            carols = UsageRow(day, "turn", "default", "wecom", "g", "carol", "m", input=limit - used - room)
            await gw.turn_services.usage.store.add([carols])
            bob = await (await gw.submit(InboundMessage("wecom", "g", "bob", "may I?"))).result()
            assert counted.reserves + counted.rides == 2  # bob's own scope only: the chat's from the lease
            gate.leases.close()  # what `LEASE_ADMIT_S` brings: the chat's lease admits no more
            await gate.drain()
            carol = await (await gw.submit(InboundMessage("wecom", "g", "carol", "and I?"))).result()
    finally:
        await stores.aclose()
    assert isinstance(bob, DoneEvent), bob
    assert isinstance(carol, ErrorEvent) and carol.code == "budget_exceeded"  # bob's turn reached the limit


@pytest.mark.parametrize("backend", ["files", "postgres"])
async def test_many_peoples_turns_under_an_agent_limit_share_the_instances_lease(
    backend: str, settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, request: pytest.FixtureRequest
) -> None:
    budgets = {"agent_month": 10**9, "chat_day": 10**9}
    settings = settings_factory(budgets=budgets, llm={"max_tokens": MAX_TOKENS}, store=store_of(backend, request))
    stores, counted = await counted_stores(settings)
    try:
        async with build_gateway(settings, stores=stores) as gw:
            for n in range(16):  # 16 people, each in a chat of their own, two turns each
                for k in range(2):
                    message = InboundMessage("wecom", f"dm-{n}", f"person-{n}", f"question {k}")
                    assert isinstance(await (await gw.submit(message)).result(), DoneEvent)
    finally:
        await stores.aclose()
    assert (
        counted.reserves + counted.rides <= 16 + 4
    )  # a call per chat (its lease; the agent's refilled with them), not per turn
