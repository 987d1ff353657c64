"""A turn's budget check made in its session's claim (PostgreSQL, `usage.ride.Ride`): a new person's first turn
refused there stores nothing; a session with a history (or moved from another instance) checks again (the ride's
reservation left out, released); turns at a budget's edge overspend by at most one reservation; a ride the turn
never uses is given back; a ride that fails fails neither the claim nor the turn."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from agenthub.config import Settings
from agenthub.hosting.app import build_gateway, open_stores
from agenthub.llm.tokens import estimate_text_tokens
from agenthub.messages import DoneEvent, ErrorEvent, InboundMessage
from agenthub.session_keys import session_key
from agenthub.storage.postgres.sessions import PostgresSessionStore
from agenthub.storage.usage import Claim, ClaimRide, UsageRow
from agenthub.usage.periods import day_of
from tests.support.budgets import (
    MAX_TOKENS,
    PER_CALL,
    CountedReserves,
    count_rows,
    counted_stores,
    postgres_budgets,
    settle_all,
    used_by,
)
from tests.support.fakes.anthropic import FakeAnthropic, reply_text
from tests.support.shared_gateways import shared_instances


async def test_a_new_persons_first_turn_refused_in_its_sessions_claim_stores_nothing(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    settings = postgres_budgets(settings_factory, postgres_dsn, user_day=1000)
    stores, counted = await counted_stores(settings)
    try:
        async with build_gateway(settings, stores=stores) as gw:
            usage = gw.turn_services.usage
            assert usage is not None
            day = day_of(gw.clock(), usage.zone)
            spent = UsageRow(day, "turn", "default", "wecom", "elsewhere", "alice", "m", input=1000)
            await usage.store.add([spent])  # her day is used up, in another chat (of another instance)
            final = await (await gw.submit(InboundMessage("wecom", "dm-new", "alice", "hello"))).result()
            database = stores.sessions.database  # type: ignore[attr-defined]
            records = await count_rows(database, "SELECT count(*) FROM session_records WHERE chat_id = 'dm-new'")
            heads = await count_rows(database, "SELECT count(*) FROM session_heads WHERE chat_id = 'dm-new'")
            reserved = await count_rows(database, "SELECT count(*) FROM usage_reservations")
            calls = await count_rows(database, "SELECT count(*) FROM usage_calls WHERE chat_id = 'dm-new'")
            ridden = usage.gate.ridden
    finally:
        await stores.aclose()
    assert isinstance(final, ErrorEvent) and final.code == "budget_exceeded"
    assert fake_llm.message_requests() == []  # refused before any model call
    assert (records, heads, reserved, calls) == (0, 0, 0, 0)  # nothing of the turn stored, nothing reserved
    assert (counted.reserves, counted.rides, ridden) == (0, 1, 1)  # checked in the claim: no call of its own


async def test_a_session_with_a_history_claimed_again_is_checked_again_without_its_rides_reservation(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """The ride was made for an empty history; the session has one, so the turn estimates more: it is checked as
    ever (one call), its ride's reservation left out (counted, her last turn would be refused: used + the ride's
    reservation reach the limit exactly) and released."""
    limit = 2000  # no lease fits (8 estimates, at most half of what is left): every turn reserves for itself
    fake_llm.default_usage = PER_CALL
    settings = postgres_budgets(settings_factory, postgres_dsn, user_day=limit)
    stores, counted = await counted_stores(settings)
    key = session_key("default", "wecom", "dm")
    try:
        async with build_gateway(settings, stores=stores) as gw:
            usage = gw.turn_services.usage
            assert usage is not None
            first = await (await gw.submit(InboundMessage("wecom", "dm", "alice", "first"))).result()
            assert isinstance(first, DoneEvent)
            assert (counted.reserves, counted.rides, usage.gate.ridden) == (0, 1, 1)
            used = await used_by(gw, "alice")
            ride = MAX_TOKENS + estimate_text_tokens("second")  # what the next ride reserves: no history
            day = day_of(gw.clock(), usage.zone)
            await usage.store.add(
                [UsageRow(day, "turn", "default", "wecom", "x", "alice", "m", input=limit - ride - used)]
            )
            gw.session_leases.release_now(key)  # as after a while: the next turn claims the session again
            second = await (await gw.submit(InboundMessage("wecom", "dm", "alice", "second"))).result()
            await usage.gate.drain()
            await usage.recorder.flush()
            reserved = await count_rows(stores.sessions.database, "SELECT count(*) FROM usage_reservations")  # type: ignore[attr-defined]
            ridden = usage.gate.ridden
    finally:
        await stores.aclose()
    assert isinstance(second, DoneEvent), second
    assert (counted.reserves, counted.rides, ridden) == (1, 2, 1)  # the second ride not used: a call of its own
    assert reserved == 0  # the unused ride's reservation released with the turn's


async def test_one_persons_concurrent_new_chats_at_the_edge_overspend_by_at_most_one_reservation(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """32 turns at once, each a new chat of alice's (each checked in its session's claim), in waves until a whole
    wave is refused: her usage ends within one reservation above her limit."""
    limit = 9000  # leases at first (the first turn's, the others waiting for its answer), none near the end
    fake_llm.default_usage = PER_CALL
    settings = postgres_budgets(settings_factory, postgres_dsn, user_day=limit)
    stores, counted = await counted_stores(settings)
    try:
        async with build_gateway(settings, stores=stores) as gw:
            usage = gw.turn_services.usage
            assert usage is not None
            for wave in range(40):
                hold = asyncio.Event()
                fake_llm.responder = lambda body, hold=hold: reply_text("ok", hold=hold)
                messages = [InboundMessage("wecom", f"c-{wave}-{n}", "alice", f"question {n}") for n in range(32)]
                handles = [await gw.submit(m) for m in messages]
                finals = await settle_all(handles, fake_llm, hold, timeout_s=30)
                await usage.gate.drain()  # the wave's settlements written
                answered = sum(isinstance(f, DoneEvent) for f in finals)
                refused = sum(isinstance(f, ErrorEvent) and f.code == "budget_exceeded" for f in finals)
                assert answered + refused == 32
                if not answered:
                    break
            else:
                raise AssertionError("the limit was never reached")
            used = await used_by(gw, "alice")
            ridden = usage.gate.ridden
    finally:
        await stores.aclose()
    reservation = MAX_TOKENS + 1 + estimate_text_tokens("question 31")
    assert limit <= used <= limit + reservation
    assert ridden > 0 and counted.rides > 0


async def test_a_ride_its_turn_never_uses_is_released_and_one_not_made_reserves_nothing(
    tmp_path: Path, settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """A ride whose claim was granted made a reservation: let go (the turn ended before its check), it is released.
    A ride whose claim was refused (another holder) made none, and the turns waiting for its lease go on."""
    settings = postgres_budgets(settings_factory, postgres_dsn, user_day=10**6)
    stores, _ = await counted_stores(settings)
    try:
        async with build_gateway(settings, stores=stores) as gw:
            usage = gw.turn_services.usage
            assert usage is not None
            gate, sessions = usage.gate, stores.sessions
            assert isinstance(sessions, PostgresSessionStore)
            agent = gw.agents.get("default")
            message = InboundMessage("wecom", "dm-a", "alice", "hi")
            ride = gate.ride(agent, message, lambda: 300, 60.0)
            assert ride is not None and ride.lease and ride.asking is not None
            claim = await sessions.claim(
                session_key("default", "wecom", "dm-a"), "session:x", "me", 15.0, ride=ride.sent
            )
            assert claim is not None and ride.sent.rows is not None
            ride.sent.done()
            assert ride.asking.done() and ride.granted  # her lease is the instance's from now on
            gate.let_go(ride)  # the turn ended before its check: her share goes back to the lease
            assert all(lease.committed == 0 and lease.running == 0 for lease in ride.granted)
            gate.leases.close()
            await gate.drain()
            held = await count_rows(sessions.database, "SELECT count(*) FROM usage_reservations")
            other = InboundMessage("wecom", "dm-b", "bob", "hi")
            refused_claim = gate.ride(agent, other, lambda: 300, 60.0)
            assert refused_claim is not None
            taken = await sessions.claim(
                session_key("default", "wecom", "dm-a"), "session:x", "someone-else", 15.0, ride=refused_claim.sent
            )
            refused_claim.sent.done()
            gate.let_go(refused_claim)
            await gate.drain()
            after = await count_rows(sessions.database, "SELECT count(*) FROM usage_reservations")
    finally:
        await stores.aclose()
    assert held == 0  # the lease ended with no turn: released
    assert taken is None and refused_claim.sent.rows is None and after == 0  # not granted: nothing reserved


class BrokenRides(CountedReserves):
    """The gateway's usage store, whose checks riding in a claim make the claim's request fail (the database
    refuses the claims' JSON): what a failure of the riding part looks like."""

    def ride(
        self, claims: Sequence[Claim], day: str, tokens: int, ttl_s: float, *, ignore: Collection[str] = ()
    ) -> ClaimRide:
        ride = super().ride(claims, day, tokens, ttl_s, ignore=ignore)
        return ClaimRide(ride.id, (ride.params[0], "[{not json", *ride.params[2:]))


async def test_a_failed_ride_fails_neither_the_claim_nor_the_turn_which_asks_the_store_itself(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    settings = postgres_budgets(settings_factory, postgres_dsn, user_day=10**6)
    stores = await open_stores(settings)
    broken = BrokenRides(stores.usage)
    stores.usage = broken  # type: ignore[assignment]  # the same store, its rides broken
    try:
        async with build_gateway(settings, stores=stores) as gw:
            final = await (await gw.submit(InboundMessage("wecom", "dm", "alice", "hello"))).result()
            assert gw.turn_services.usage is not None
            ridden = gw.turn_services.usage.gate.ridden
    finally:
        await stores.aclose()
    assert isinstance(final, DoneEvent), final
    assert (broken.rides, broken.reserves, ridden) == (1, 1, 0)  # the ride failed: checked by a call of its own


async def test_a_session_moved_to_another_instance_is_checked_there_as_ever(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """alice's chat answered by one instance, her next message by another: that one claims the session (its check
    riding in the claim, made for an empty history) and finds her history, so it checks her turn as ever; nothing
    stays reserved."""
    fake_llm.default_usage = PER_CALL
    budgets = {"user_day": 2000}  # no lease fits: every turn reserves for itself
    async with shared_instances(
        tmp_path, fake_llm, postgres_dsn, 2, budgets=budgets, llm={"max_tokens": MAX_TOKENS}
    ) as instances:
        first = await (await instances[0].gateway.submit(InboundMessage("wecom", "dm", "alice", "first"))).result()
        second = await (await instances[1].gateway.submit(InboundMessage("wecom", "dm", "alice", "second"))).result()
        gates = [i.gateway.turn_services.usage.gate for i in instances if i.gateway.turn_services.usage]
        for gate in gates:
            await gate.drain()
        reserved = await count_rows(instances[0].stores.usage.database, "SELECT count(*) FROM usage_reservations")  # type: ignore[attr-defined]
        history = await instances[1].gateway.history.load(session_key("default", "wecom", "dm"))
    assert isinstance(first, DoneEvent) and isinstance(second, DoneEvent), (first, second)
    assert [gate.ridden for gate in gates] == [1, 0]  # the moved turn's ride was not for its estimate
    assert reserved == 0
    assert len(history) == 4  # both turns' messages and answers, in one history
