"""Three instances on one database: one person's messages spread over them overspend by at most one reservation."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path

from agenthub.llm.tokens import estimate_text_tokens
from agenthub.messages import DoneEvent, ErrorEvent, InboundMessage, ReplyEvent
from agenthub.session_keys import session_key
from agenthub.storage.usage import Scope
from agenthub.usage.report import totals
from tests.support.budgets import settle_all
from tests.support.fakes.anthropic import FakeAnthropic, reply_text
from tests.support.shared_gateways import Instance, shared_instances

MAX_TOKENS = 200
LIMIT = 1500


async def test_one_persons_turns_spread_over_three_instances_overspend_by_at_most_one_reservation(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    fake_llm.default_usage = {"input_tokens": 100, "output_tokens": 50}
    budgets = {"user_day": LIMIT}
    async with shared_instances(
        tmp_path, fake_llm, postgres_dsn, 3, budgets=budgets, llm={"max_tokens": MAX_TOKENS}
    ) as instances:
        for wave in range(3):
            before = len(fake_llm.message_requests())
            messages = [InboundMessage("wecom", f"chat-{wave}-{n}", "alice", f"question {n}") for n in range(30)]
            finals = await _wave(instances, fake_llm, messages)
            answered = [f for f in finals if isinstance(f, DoneEvent)]
            refused = [f for f in finals if isinstance(f, ErrorEvent) and f.code == "budget_exceeded"]
            assert len(answered) + len(refused) == 30
            assert len(fake_llm.message_requests()) - before == len(answered)
            assert refused
        assert all(_ridden(instances))  # every instance checked new chats' turns in their sessions' claims
        for instance in instances:
            usage = instance.gateway.turn_services.usage
            assert usage is not None
            await usage.recorder.flush()
        rows = await instances[0].stores.usage.days("2000-01-01", "2100-01-01")
    used = totals(rows, Scope("user", "wecom", "alice"), "2000-01-01", {}).tokens
    reservation = MAX_TOKENS + 1 + estimate_text_tokens("question 29")
    assert LIMIT <= used <= LIMIT + reservation
    assert {r.sender_id for r in rows} == {"alice"}


async def test_with_budget_leases_three_instances_still_overspend_by_at_most_one_reservation(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """Far from the limit each instance admits from leases (several turns per database call); near it every turn
    reserves for itself: the same guarantee."""
    fake_llm.default_usage = {"input_tokens": 100, "output_tokens": 50}
    limit = 9000
    async with shared_instances(
        tmp_path, fake_llm, postgres_dsn, 3, budgets={"user_day": limit}, llm={"max_tokens": MAX_TOKENS}
    ) as instances:
        await _waves_until_all_refused(
            instances, fake_llm, lambda wave, n: InboundMessage("wecom", f"chat-{wave}-{n}", "alice", f"question {n}")
        )
        leased = _leases_granted(instances)
        rows = await instances[0].stores.usage.days("2000-01-01", "2100-01-01")
    used = totals(rows, Scope("user", "wecom", "alice"), "2000-01-01", {}).tokens
    reservation = MAX_TOKENS + 1 + estimate_text_tokens("question 14")
    assert limit <= used <= limit + reservation
    assert sum(leased) > 0  # the instances did admit turns from leases


async def test_many_peoples_turns_under_an_agent_limit_on_three_instances_overspend_by_at_most_one_reservation(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """Each instance admits the agent's turns (whoever sends them) from its own lease of the agent's scope; near the
    limit every turn reserves for itself: the agent's usage ends within one reservation above its limit (and below
    it by at most what the other instances' last leases had left, less than a turn's estimate each)."""
    fake_llm.default_usage = {"input_tokens": 100, "output_tokens": 50}
    limit = 9000
    async with shared_instances(
        tmp_path, fake_llm, postgres_dsn, 3, budgets={"agent_day": limit}, llm={"max_tokens": MAX_TOKENS}
    ) as instances:
        await _waves_until_all_refused(
            instances,
            fake_llm,
            lambda wave, n: InboundMessage("wecom", f"dm-{wave}-{n}", f"p{wave}-{n}", f"question {n}"),
        )
        leased = _leases_granted(instances)
        ridden = _ridden(instances)
        rows = await instances[0].stores.usage.days("2000-01-01", "2100-01-01")
    used = totals(rows, Scope("agent", "", "default"), "2000-01-01", {}).tokens
    reservation = MAX_TOKENS + 1 + estimate_text_tokens("question 14")
    assert limit - 2 * reservation <= used <= limit + reservation
    assert all(leased)  # every instance admitted the agent's turns from leases of its own
    assert all(ridden)


async def _wave(instances: Sequence[Instance], fake: FakeAnthropic, messages: list[InboundMessage]) -> list[ReplyEvent]:
    """`messages` submitted round robin over the instances, answered by the model together; every instance's
    settlements written before it returns."""
    hold = asyncio.Event()
    fake.responder = lambda body: reply_text("ok", hold=hold)
    handles = await asyncio.gather(*(instances[n % len(instances)].gateway.submit(m) for n, m in enumerate(messages)))
    finals = await settle_all(list(handles), fake, hold, timeout_s=30)
    for instance in instances:
        assert instance.gateway.turn_services.usage is not None
        await instance.gateway.turn_services.usage.gate.drain()
    return finals


async def _waves_until_all_refused(
    instances: Sequence[Instance], fake: FakeAnthropic, message: Callable[[int, int], InboundMessage]
) -> None:
    """Waves of 15 turns (`message(wave, n)`) until a whole wave is refused: the limit reached, nothing reserved."""
    for wave in range(40):
        finals = await _wave(instances, fake, [message(wave, n) for n in range(15)])
        answered = sum(isinstance(f, DoneEvent) for f in finals)
        assert answered + sum(isinstance(f, ErrorEvent) and f.code == "budget_exceeded" for f in finals) == 15
        if not answered:
            return
    raise AssertionError("the limit was never reached")


def _leases_granted(instances: Sequence[Instance]) -> list[int]:
    """How many budget leases each instance was granted."""
    return [
        i.gateway.turn_services.usage.gate.leases.granted_count if i.gateway.turn_services.usage else 0
        for i in instances
    ]


def _ridden(instances: Sequence[Instance]) -> list[int]:
    """How many turns each instance checked in their sessions' claims (`usage.ride.Ride`)."""
    return [i.gateway.turn_services.usage.gate.ridden if i.gateway.turn_services.usage else 0 for i in instances]


async def test_returning_sessions_on_three_instances_checked_again_after_their_rides_overspend_by_at_most_one(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """Sessions with a history claimed again on other instances: each ride (made for an empty history) is let go
    and the turn checked again with its larger estimate; at the edge her usage still ends within one
    reservation of her limit, and nothing stays reserved."""
    fake_llm.default_usage = {"input_tokens": 100, "output_tokens": 50}
    async with shared_instances(
        tmp_path, fake_llm, postgres_dsn, 3, budgets={"user_day": LIMIT}, llm={"max_tokens": MAX_TOKENS}
    ) as instances:
        chats = [f"dm-{n}" for n in range(6)]
        for wave in range(12):  # until a whole wave is refused
            messages = [InboundMessage("wecom", chat, "alice", f"question {wave}") for chat in chats]
            order = instances[wave % 3 :] + instances[: wave % 3]  # each session moves to another instance
            finals = await _wave(order, fake_llm, messages)
            refused = sum(isinstance(f, ErrorEvent) and f.code == "budget_exceeded" for f in finals)
            assert refused + sum(isinstance(f, DoneEvent) for f in finals) == len(chats)
            if refused == len(chats):
                break
            for instance in instances:  # as after a while: the next claims are granted at once, riding
                for chat in chats:
                    instance.gateway.session_leases.release_now(session_key("default", "wecom", chat))
            await asyncio.sleep(0.3)
        else:
            raise AssertionError("the limit was never reached")
        ridden = _ridden(instances)
        for instance in instances:
            usage = instance.gateway.turn_services.usage
            assert usage is not None
            usage.gate.leases.close()
            await usage.gate.drain()
            await usage.recorder.flush()
        rows = await instances[0].stores.usage.days("2000-01-01", "2100-01-01")
        database = instances[0].stores.sessions.database  # type: ignore[attr-defined]
        async with database.connection("test count") as conn:
            held = await (
                await conn.execute("SELECT count(*) FROM usage_reservations WHERE expires_at > now()")
            ).fetchone()
    used = totals(rows, Scope("user", "wecom", "alice"), "2000-01-01", {}).tokens
    reservation = 100 + MAX_TOKENS + 1 + estimate_text_tokens("question 11")  # the last prompt, the message, the room
    assert LIMIT <= used <= LIMIT + reservation
    assert sum(ridden) > 0 and held == (0,)


async def test_a_session_back_from_another_instance_is_checked_for_the_prompt_that_instance_left(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """A answers her first message (a 100-token prompt), B her second (50,000), A her third: A's check reserves
    for B's last prompt. What A's cache held before B took the session (`SessionHistory.peek_now` never answers
    it: not held, then reloaded) would have reserved a few hundred tokens."""
    fake_llm.default_usage = {"input_tokens": 100, "output_tokens": 50}
    key = session_key("default", "wecom", "dm")
    scope = Scope("user", "wecom", "alice").key
    async with shared_instances(
        tmp_path, fake_llm, postgres_dsn, 2, budgets={"user_day": 10**8}, llm={"max_tokens": MAX_TOKENS}
    ) as (a, b):
        first = await a.gateway.submit(InboundMessage("wecom", "dm", "alice", "m1"))
        assert isinstance(await first.result(), DoneEvent)
        fake_llm.default_usage = {"input_tokens": 50_000, "output_tokens": 50}  # below consolidation's threshold
        second = await b.gateway.submit(InboundMessage("wecom", "dm", "alice", "m2"))
        assert isinstance(await second.result(), DoneEvent)
        async with asyncio.timeout(30):
            while a.gateway.session_leases.holds(key):  # noqa: ASYNC110 (A let it go when B asked for it)
                await asyncio.sleep(0.01)
        assert a.gateway.history.peek_now(key) is None  # not held: what A cached is no answer
        hold = asyncio.Event()
        fake_llm.responder = lambda body: reply_text("ok", hold=hold)
        third = await a.gateway.submit(InboundMessage("wecom", "dm", "alice", "m3"))
        async with asyncio.timeout(30):
            while not fake_llm.in_flight:  # noqa: ASYNC110 (the turn admitted, at the model)
                await asyncio.sleep(0.01)
        database = a.stores.sessions.database  # type: ignore[attr-defined]
        async with database.connection("test reservations") as conn:
            cursor = await conn.execute("SELECT max(tokens) FROM usage_reservations WHERE scope = %s", (scope,))
            found = await cursor.fetchone()
        hold.set()
        assert isinstance(await third.result(), DoneEvent)
    assert found is not None and found[0] >= 50_000 + MAX_TOKENS, found
