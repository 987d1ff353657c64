"""A turn's check riding in its session's claim (PostgreSQL) at the edges: odd ids, the warning once per period,
the day's rollover, exempt senders, per-agent overrides, a claim that waits past the turn's time limit."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from agenthub.clock import ManualClock
from agenthub.config import Settings
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent, ErrorEvent, InboundMessage, NoticeEvent
from agenthub.session_keys import session_key
from agenthub.storage.postgres.database import Database
from agenthub.storage.postgres.sessions import PostgresSessionStore
from agenthub.storage.usage import UsageRow
from agenthub.usage.leases import LEASE_TURNS
from agenthub.usage.periods import day_of
from agenthub.usage.ride import Ride
from tests.support.budgets import MAX_TOKENS, PER_CALL, count_rows, counted_stores, postgres_budgets, used_by
from tests.support.fakes.anthropic import FakeAnthropic

ODD_SENDER = "o'brien\" 王小明 %s%(x)s;--"
ODD_CHAT = "群'\"聊 x;DROP TABLE leases;--%s%(x)s"


async def test_odd_ids_ride_in_the_claim_and_are_refused_there_storing_nothing(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    settings = postgres_budgets(settings_factory, postgres_dsn, user_day=10**6)
    stores, counted = await counted_stores(settings)
    try:
        async with build_gateway(settings, stores=stores) as gw:
            usage = gw.turn_services.usage
            assert usage is not None
            day = day_of(gw.clock(), usage.zone)
            await usage.store.add([UsageRow(day, "turn", "default", "wecom", "x", ODD_SENDER, "m", input=10**6)])
            refused = await (await gw.submit(InboundMessage("wecom", ODD_CHAT + "2", ODD_SENDER, "hi"))).result()
            first = await (await gw.submit(InboundMessage("wecom", ODD_CHAT, ODD_SENDER + "'", "hello"))).result()
            assert isinstance(first, DoneEvent), first
            await usage.gate.drain()
            await usage.recorder.flush()
            database = stores.sessions.database  # type: ignore[attr-defined]
            records = await count_rows(
                database, "SELECT count(*) FROM session_records WHERE chat_id = %s", ODD_CHAT + "2"
            )
            reserved = await count_rows(database, "SELECT count(*) FROM usage_reservations WHERE expires_at > now()")
            ridden = usage.gate.ridden
    finally:
        await stores.aclose()
    assert isinstance(refused, ErrorEvent) and refused.code == "budget_exceeded", refused
    assert records == 0
    assert (counted.reserves, ridden) == (0, 2)
    assert reserved <= 2  # at most her (idle) lease grant; no turn's reservation left


async def test_the_warning_comes_once_per_period_when_every_turn_is_a_new_chat(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    settings = postgres_budgets(settings_factory, postgres_dsn, user_day=2000, warn_at=0.5)
    fake_llm.default_usage = PER_CALL
    clock = ManualClock(1_764_777_600.0 + 3600)
    stores, _ = await counted_stores(settings)
    try:
        async with build_gateway(settings, clock=clock, stores=stores) as gw:
            usage = gw.turn_services.usage
            assert usage is not None

            async def notices(n: int) -> list[str]:
                events = [e async for e in await gw.submit(InboundMessage("wecom", f"new-{n}", "me", f"m{n}"))]
                assert isinstance(events[-1], DoneEvent), events[-1]
                await usage.gate.drain()
                return [e.text for e in events if isinstance(e, NoticeEvent)]

            seen = [await notices(n) for n in range(12)]
            first_day = sum(1 for texts in seen if texts)
            clock.advance(86400)
            seen = [await notices(n) for n in range(12, 24)]
            second_day = sum(1 for texts in seen if texts)
            ridden = usage.gate.ridden
    finally:
        await stores.aclose()
    assert (first_day, second_day) == (1, 1)
    assert ridden > 0


async def test_exempt_senders_ride_nothing_and_are_never_refused(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    settings = postgres_budgets(settings_factory, postgres_dsn, user_day=10, exempt=["wecom:boss"])
    stores, counted = await counted_stores(settings)
    try:
        async with build_gateway(settings, stores=stores) as gw:
            finals = [
                await (await gw.submit(InboundMessage("wecom", f"b-{n}", "boss", f"m{n}"))).result() for n in range(3)
            ]
            used = await used_by(gw, "boss")
    finally:
        await stores.aclose()
    assert all(isinstance(f, DoneEvent) for f in finals)
    assert used > 10 and (counted.rides, counted.reserves) == (0, 0)


async def test_an_agent_override_rides_with_that_agents_limits_only(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    settings = postgres_budgets(settings_factory, postgres_dsn)
    agent_dir = settings.agents_dir / "tight"
    agent_dir.mkdir(parents=True)
    (agent_dir / "agent.json").write_text('{"budgets": {"agent_day": 1}}', encoding="utf-8")
    (agent_dir / "AGENTS.md").write_text("You are tight.", encoding="utf-8")
    stores, counted = await counted_stores(settings)
    try:
        async with build_gateway(settings, stores=stores) as gw:
            first = await (await gw.submit(InboundMessage("wecom", "t1", "me", "hi", agent="tight"))).result()
            await used_by(gw, "me")
            second = await (await gw.submit(InboundMessage("wecom", "t2", "me", "hi", agent="tight"))).result()
            free = await (await gw.submit(InboundMessage("wecom", "f1", "me", "hi"))).result()
    finally:
        await stores.aclose()
    assert isinstance(first, DoneEvent)
    assert isinstance(second, ErrorEvent) and second.code == "budget_exceeded"
    assert isinstance(free, DoneEvent)
    assert counted.rides == 2  # the default agent has no limit: nothing rides for it


async def test_a_claim_waiting_past_the_turns_limit_leaves_no_reservation_and_no_waiter_stuck(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """The session's lock is held elsewhere: the riding claim waits in the database until the turn's time limit
    cancels it; her other turn (another chat) waiting for the ride's lease goes on; nothing stays reserved."""
    settings = settings_factory(
        budgets={"user_day": 10**6},
        llm={"max_tokens": MAX_TOKENS},
        store={"backend": "postgres", "dsn": postgres_dsn},
        session={"lock_timeout_s": 1.0},
    )
    stores, counted = await counted_stores(settings)
    database: Database = stores.sessions.database  # type: ignore[attr-defined]
    try:
        async with build_gateway(settings, stores=stores) as gw:
            usage = gw.turn_services.usage
            assert usage is not None
            async with database.connection("hold the session's lock") as holder:
                await holder.execute("SELECT pg_advisory_lock(hashtextextended('default:wecom:blocked', 0))")
                stuck = await gw.submit(InboundMessage("wecom", "blocked", "alice", "hello"))
                await asyncio.sleep(0.2)
                other = await gw.submit(InboundMessage("wecom", "free", "alice", "hello"))
                other_final = await asyncio.wait_for(other.result(), 5)
                stuck_final = await asyncio.wait_for(stuck.result(), 5)
                await holder.execute("SELECT pg_advisory_unlock_all()")
            await asyncio.sleep(0.3)
            await usage.gate.drain()
            await usage.recorder.flush()
            usage.gate.leases.close()
            await usage.gate.drain()
            await usage.recorder.flush()
            reserved = await count_rows(database, "SELECT count(*) FROM usage_reservations WHERE expires_at > now()")
    finally:
        await stores.aclose()
    assert isinstance(other_final, DoneEvent), other_final
    assert isinstance(stuck_final, ErrorEvent), stuck_final
    assert reserved == 0 and counted.rides >= 1


async def test_a_rides_lease_too_small_for_a_returning_sessions_turn_does_not_size_up_the_next_lease(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """Her session has a long history: the ride (made for an empty one) was granted a lease of 8 small estimates,
    too small for the turn. That lease was never spent by turns: the turn's own lease holds 8 of its estimates,
    as a lease asked without a ride would (not twice as many, as after a lease spent within its window)."""
    settings = postgres_budgets(settings_factory, postgres_dsn, user_day=10**8)
    fake_llm.default_usage = {"input_tokens": 20_000, "output_tokens": 50}  # her prompts are long
    stores, counted = await counted_stores(settings)
    key = session_key("default", "wecom", "dm")
    try:
        async with build_gateway(settings, stores=stores) as gw:
            usage = gw.turn_services.usage
            assert usage is not None
            gate = usage.gate
            assert isinstance(await (await gw.submit(InboundMessage("wecom", "dm", "alice", "hi"))).result(), DoneEvent)
            gate.leases.close()  # what `LEASE_ADMIT_S` brings: her first lease admits no more
            await gate.drain()
            gw.session_leases.release_now(key)  # as after a while: the next turn claims the session again
            message = InboundMessage("wecom", "dm", "alice", "again")
            assert isinstance(await (await gw.submit(message)).result(), DoneEvent)
            part = gate.plan(gw.agents.get("default"), message).parts_of(gate.today())[0]
            turns = gate.leases.turns(part)
    finally:
        await stores.aclose()
    assert counted.rides == 2
    assert turns == LEASE_TURNS


async def test_a_riding_claim_brings_what_the_claim_alone_brings_and_reserves_only_when_granted_and_not_fenced_out(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """A session with a history: refused (another holder), the riding claim reserves nothing; granted, it brings
    the history as the claim alone does, then the reservation; fenced out by a newer token, nothing reserved."""
    settings = postgres_budgets(settings_factory, postgres_dsn, user_day=10**6)
    stores, _ = await counted_stores(settings)
    key = session_key("default", "wecom", "dm")
    try:
        async with build_gateway(settings, stores=stores) as gw:
            usage = gw.turn_services.usage
            assert usage is not None
            for text in ("one", "two"):
                assert isinstance(
                    await (await gw.submit(InboundMessage("wecom", "dm", "alice", text))).result(), DoneEvent
                )
            gw.session_leases.release_now(key)
            agent, message = gw.agents.get("default"), InboundMessage("wecom", "dm", "alice", "three")
            sessions = stores.sessions
            assert isinstance(sessions, PostgresSessionStore)
            database = sessions.database
            await count_rows(database, "SELECT count(*) FROM pg_sleep(0.2)")  # the release written
            alone = PostgresSessionStore(database)  # a store of its own: no copy, every record comes
            expected = await alone.claim(key, "session:t", "me", 15.0)
            assert expected is not None
            records = len(await alone.load(key))

            usage.gate.leases.close()  # her leases admit no more: each check below asks the store

            def ride() -> Ride:
                made = usage.gate.ride(agent, message, lambda: 300, 60.0)
                assert made is not None
                return made

            def answered(made: Ride) -> None:
                made.sent.done()
                usage.gate.let_go(made)

            refused = ride()
            other = await PostgresSessionStore(database).claim(key, "session:t", "other", 15.0, ride=refused.sent)
            answered(refused)
            granted, riding = ride(), PostgresSessionStore(database)
            claim = await riding.claim(key, "session:t", "me", 15.0, ride=granted.sent)
            assert claim is not None and granted.sent.rows is not None
            got = len(await riding.load(key))
            held = await count_rows(database, "SELECT count(*) FROM usage_reservations WHERE id = %s", granted.sent.id)
            answered(granted)
            async with database.connection("test fence") as conn:
                await conn.execute("UPDATE session_fences SET fence = fence + 100 WHERE chat_id = 'dm'")
            await database_expire(database)
            usage.gate.leases.close()
            fenced = ride()
            out = await PostgresSessionStore(database).claim(key, "session:t", "third", 15.0, ride=fenced.sent)
            none = await count_rows(database, "SELECT count(*) FROM usage_reservations WHERE id = %s", fenced.sent.id)
            answered(fenced)
    finally:
        await stores.aclose()
    assert (other, refused.sent.rows, got, held) == (None, None, records, 1) and records >= 4
    assert out is not None and out.fenced_out and fenced.sent.rows is None and none == 0


async def database_expire(database: Database) -> None:
    async with database.connection("test expire") as conn:
        await conn.execute("UPDATE leases SET expires_at = now() WHERE name = 'session:t'")
