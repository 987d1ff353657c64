"""Leases: one holder at a time, takeover after expiry with a newer fencing token, and the keeper that holds one."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass

import pytest
import pytest_asyncio
import structlog

from agenthub.clock import ManualClock
from agenthub.log import configure_logging
from agenthub.storage.lease import FREED, WANTED, InProcessLeases, Lease, LeaseKeeper, LeaseTakeovers, renew_all
from agenthub.storage.ports import LeaseStore
from agenthub.storage.postgres import Database, PostgresLeases
from tests.support.leases import DownableLeases, LateGrants
from tests.support.postgres import fresh_database, migrated


@dataclass
class Leases:
    """A lease store under test, the TTL to use with it, and how to let a lease granted now expire."""

    store: LeaseStore
    ttl_s: float
    expire: Callable[[], Awaitable[None]]


def _in_process(stack: AsyncExitStack) -> Leases:
    clock = ManualClock()

    async def expire() -> None:
        clock.advance(15.1)

    return Leases(InProcessLeases(clock=clock), 15, expire)


def _postgres(stack: AsyncExitStack) -> Leases:
    """The database's clock judges expiry: a short TTL, and a real wait past it."""
    database = Database(migrated(stack.enter_context(fresh_database())))
    stack.push_async_callback(database.close)
    return Leases(PostgresLeases(database), 2.0, lambda: asyncio.sleep(2.1))


LEASE_FACTORIES: dict[str, Callable[[AsyncExitStack], Leases]] = {"in-process": _in_process, "postgres": _postgres}


@pytest_asyncio.fixture(params=sorted(LEASE_FACTORIES))
async def leases(request: pytest.FixtureRequest) -> AsyncIterator[Leases]:
    async with AsyncExitStack() as stack:
        yield LEASE_FACTORIES[str(request.param)](stack)


async def test_of_ten_contenders_at_the_same_moment_exactly_one_holds_the_lease(leases: Leases) -> None:
    start = asyncio.Event()

    async def contend(n: int) -> Lease | None:
        await start.wait()
        return await leases.store.acquire("session:a", f"instance-{n}", ttl_s=leases.ttl_s)

    tasks = [asyncio.create_task(contend(n)) for n in range(10)]
    await asyncio.sleep(0)
    start.set()
    granted = [lease for lease in await asyncio.gather(*tasks) if lease is not None]
    assert len(granted) == 1


async def test_an_expired_lease_is_taken_over_with_a_newer_token_and_the_old_holder_cannot_renew(
    leases: Leases,
) -> None:
    store, ttl = leases.store, leases.ttl_s
    first = await store.acquire("l3", "a", ttl_s=ttl)
    assert first is not None
    assert await store.acquire("l3", "b", ttl_s=ttl) is None
    renewed = await store.acquire("l3", "a", ttl_s=ttl)
    assert renewed is not None and renewed.token == first.token  # re-acquiring one's own lease keeps the token
    await leases.expire()
    second = await store.acquire("l3", "b", ttl_s=ttl)
    assert second is not None and second.token > first.token
    assert await store.renew(first, ttl_s=ttl) is None
    await store.release(first)  # a stale release must not free the new holder's lease
    assert await store.acquire("l3", "c", ttl_s=ttl) is None


async def test_a_released_lease_is_free_at_once_and_its_next_grant_has_a_newer_token(leases: Leases) -> None:
    first = await leases.store.acquire("wecom-bot", "a", ttl_s=leases.ttl_s)
    assert first is not None
    renewed = await leases.store.renew(first, ttl_s=leases.ttl_s)
    assert renewed is not None and renewed.token == first.token
    await leases.store.release(first)
    second = await leases.store.acquire("wecom-bot", "b", ttl_s=leases.ttl_s)
    assert second is not None and second.token > first.token
    again = await leases.store.acquire("wecom-bot", "a", ttl_s=leases.ttl_s)
    assert again is None


async def test_leases_renewed_together_extend_the_live_ones_and_report_the_one_taken_over(leases: Leases) -> None:
    store, ttl = leases.store, leases.ttl_s
    taken = await store.acquire("session:b", "a", ttl_s=ttl)
    await leases.expire()
    assert taken is not None and await store.acquire("session:b", "other", ttl_s=ttl) is not None
    first, third = await store.acquire("session:c", "a", ttl_s=ttl), await store.acquire("session:a", "a", ttl_s=ttl)
    assert first is not None and third is not None
    renewed = await renew_all(store, [first, taken, third], ttl)
    assert [lease.name if lease is not None else None for lease in renewed] == ["session:c", None, "session:a"]
    assert [lease.token for lease in renewed if lease is not None] == [first.token, third.token]
    assert await store.acquire("session:c", "other", ttl_s=ttl) is None  # still a's


class HangingLeases(InProcessLeases):
    """A lease store whose server stops answering: calls never return (until the test ends)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.hang = False
        self._never = asyncio.Event()

    async def renew(self, lease: Lease, ttl_s: float) -> Lease | None:
        if self.hang:
            await self._never.wait()
        return await super().renew(lease, ttl_s)


async def test_a_keeper_gains_a_free_lease_and_a_standby_takes_over_when_the_holder_stops() -> None:
    clock = ManualClock()
    leases = InProcessLeases(clock=clock)
    events: list[str] = []
    a = LeaseKeeper(
        leases,
        "wecom-bot",
        "a",
        ttl_s=15,
        clock=clock,
        on_gained=lambda _: events.append("a+"),
        on_lost=lambda: events.append("a-"),
    )
    b = LeaseKeeper(leases, "wecom-bot", "b", ttl_s=15, clock=clock, on_gained=lambda _: events.append("b+"))
    await a.step()
    await b.step()
    assert (a.held, b.held) == (True, False)
    await a.stop()
    await b.step()
    assert events == ["a+", "a-", "b+"]


async def test_a_gain_after_another_holder_counts_as_a_takeover_a_first_grant_and_a_regain_of_ones_own_do_not() -> None:
    clock = ManualClock()
    leases = DownableLeases(clock)
    a_count, b_count = LeaseTakeovers(), LeaseTakeovers()
    a = LeaseKeeper(leases, "scheduler", "a", ttl_s=15, clock=clock, takeovers=a_count)
    b = LeaseKeeper(leases, "scheduler", "b", ttl_s=15, clock=clock, takeovers=b_count)
    await a.step()  # the first grant ever
    await b.step()
    assert (a.held, a_count.count, b_count.count) == (True, 0, 0)
    leases.down = True  # a cannot renew: it gives the lease up, and it expires
    clock.advance(16)
    await a.step()
    leases.down = False
    await a.step()  # regained by a, nobody had it in between
    assert (a.held, a_count.count) == (True, 0)
    clock.advance(16)  # a dies; b takes over
    await b.step()
    assert (b.held, b_count.count) == (True, 1)
    await a.step()
    assert not a.held
    await b.stop()
    await a.step()  # a again, after b had it
    assert (a.held, a_count.count) == (True, 1)


async def test_a_keeper_that_cannot_reach_the_store_stops_once_its_lease_has_expired() -> None:
    clock = ManualClock()
    leases = DownableLeases(clock)
    lost: list[bool] = []
    keeper = LeaseKeeper(leases, "l3", "a", ttl_s=15, clock=clock, on_lost=lambda: lost.append(True))
    await keeper.step()
    assert keeper.held
    leases.down = True
    clock.advance(5)
    await keeper.step()
    assert keeper.held and not lost  # still within the lease: keep going
    clock.advance(11)
    await keeper.step()
    assert not keeper.held and lost == [True]
    leases.down = False
    other = await leases.acquire("l3", "b", ttl_s=15)
    assert other is not None  # the expired lease is free for another instance


async def test_a_keeper_whose_lease_was_taken_calls_on_lost() -> None:
    clock = ManualClock()
    leases = InProcessLeases(clock=clock)
    lost: list[bool] = []
    keeper = LeaseKeeper(leases, "l3", "a", ttl_s=15, clock=clock, on_lost=lambda: lost.append(True))
    await keeper.step()
    clock.advance(16)  # the keeper missed its renewals (a paused process)
    assert await leases.acquire("l3", "b", ttl_s=15) is not None
    await keeper.step()
    assert lost == [True] and keeper.lease is None


async def test_the_running_keeper_renews_at_a_third_of_the_ttl() -> None:
    clock = ManualClock()
    leases = InProcessLeases(clock=clock)
    keeper = LeaseKeeper(leases, "l3", "a", ttl_s=15, clock=clock)
    keeper.start()
    for _ in range(10):
        await asyncio.sleep(0)
    for _ in range(12):  # a minute, renewed every 5 s: never expires
        clock.advance(5)
        for _ in range(10):
            await asyncio.sleep(0)
        assert keeper.held
    assert await leases.acquire("l3", "b", ttl_s=15) is None
    await keeper.stop()
    assert await leases.acquire("l3", "b", ttl_s=15) is not None


async def test_a_keeper_that_cannot_reach_the_store_stops_a_third_of_the_ttl_before_its_lease_expires() -> None:
    """The standby may take the lease at its expiry: the holder must have stopped by then, with time to spare
    for its own stop (closing a connection), or two instances would hold the singleton at once."""
    clock = ManualClock()
    leases = DownableLeases(clock)
    lost: list[float] = []
    keeper = LeaseKeeper(leases, "wecom-bot:team", "a", ttl_s=15, clock=clock, on_lost=lambda: lost.append(clock()))
    await keeper.step()
    assert keeper.lease is not None
    expires_at = keeper.lease.expires_at
    leases.down = True
    clock.advance(5)
    await keeper.step()
    assert keeper.held and not lost
    clock.advance(5)
    await keeper.step()
    assert not keeper.held and lost and lost[0] <= expires_at - 5
    leases.down = False
    assert await leases.acquire("wecom-bot:team", "b", ttl_s=15) is None  # no standby could have taken it yet


async def test_the_running_keeper_gives_up_in_time_even_when_the_store_hangs() -> None:
    """A store call that never returns (a server gone silent) must not keep the keeper past its margin."""
    clock = ManualClock()
    leases = HangingLeases(clock)
    lost: list[float] = []
    keeper = LeaseKeeper(leases, "memory-l3", "a", ttl_s=15, clock=clock, on_lost=lambda: lost.append(clock()))
    keeper.start()
    await _settle()
    assert keeper.lease is not None
    expires_at = keeper.lease.expires_at
    leases.hang = True
    for _ in range(2):
        clock.advance(5)
        await _settle()
    assert lost and lost[0] <= expires_at - 5 and not keeper.held
    await keeper.stop()


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_a_renewal_goes_through_while_every_connection_of_the_main_pool_is_lent(postgres_dsn: str) -> None:
    """An instance whose turns hold every pooled connection still renews its leases: renewals have their own lane,
    so a busy instance does not lose its sessions to its own pool's queue."""
    database = Database(postgres_dsn, max_size=1, checkout_timeout_s=60.0)
    try:
        leases = PostgresLeases(database)
        lease = await leases.acquire("session:busy", "a", 30.0)
        assert lease is not None
        lent, give_back = asyncio.Event(), asyncio.Event()

        async def a_long_statement() -> None:
            async with database.connection("hold the only connection"):
                lent.set()
                await give_back.wait()

        holder = asyncio.create_task(a_long_statement())
        await lent.wait()
        renewal = asyncio.ensure_future(leases.renew(lease, 30.0))
        done, _ = await asyncio.wait([renewal], timeout=30.0)  # a liveness bound, far below the checkout's 60 s
        give_back.set()
        await holder
        assert renewal in done, "the renewal waited for the main pool's connection"
        renewed = renewal.result()
        assert renewed is not None and renewed.token == lease.token
    finally:
        await database.close()


async def test_a_keeper_whose_grant_arrived_late_renews_at_once_instead_of_giving_the_lease_up() -> None:
    """The grant reached the keeper half a lease after it was made (a loaded store): less is left of it than a
    renewal period, so the first renewal is due by the lease's own time, at once."""
    clock = ManualClock()
    leases = LateGrants(clock, 7.5, prefix="", round_trip_s=0.01)
    lost: list[bool] = []
    keeper = LeaseKeeper(leases, "l3", "a", ttl_s=15, clock=clock, on_lost=lambda: lost.append(True))
    keeper.start()
    for _ in range(10):
        await asyncio.sleep(0)
    for _ in range(24):  # a minute and a half in steps of 2.5 s, each renewal answered (10 ms) before the next
        await asyncio.sleep(0.05)
        clock.advance(2.5)
    assert keeper.held and lost == []
    await keeper.stop()


async def test_a_contender_asks_the_holder_for_the_lease_and_hears_when_it_is_freed(postgres_dsn: str) -> None:
    """PostgreSQL's signals: a refused `acquire_or_ask` reaches every listener as WANTED (the holder lets the
    lease go), a release as FREED (the contender tries again at once instead of at its next poll)."""
    database = Database(postgres_dsn)
    heard: list[tuple[str, str]] = []
    arrived = asyncio.Event()

    def on_signal(kind: str, name: str) -> None:
        heard.append((kind, name))
        arrived.set()

    leases = PostgresLeases(database)
    listener = asyncio.create_task(leases.listen(on_signal))
    try:
        held = await leases.acquire_or_ask("session:asked", "a", 30.0)
        assert held is not None
        async with asyncio.timeout(30):  # the listener's LISTEN is in place once a signal of ours comes back
            while not heard:
                await leases.acquire_or_ask("session:warm-up", "b", 30.0)
                await leases.acquire_or_ask("session:warm-up", "c", 30.0)
                await asyncio.wait([asyncio.ensure_future(arrived.wait())], timeout=0.1)
        heard.clear()
        assert await leases.acquire_or_ask("session:asked", "b", 30.0) is None
        await leases.release(held)
        async with asyncio.timeout(30):
            while len(heard) < 2:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        assert heard == [(WANTED, "session:asked"), (FREED, "session:asked")]
        granted = await leases.acquire_or_ask("session:asked", "b", 30.0)
        assert granted is not None and granted.token > held.token
    finally:
        listener.cancel()
        await asyncio.wait([listener])
        await database.close()


async def test_a_keepers_hold_keeps_its_number_while_the_lease_stays_live_and_a_new_one_after_a_lapse() -> None:
    clock = ManualClock()
    leases = DownableLeases(clock)
    keeper = LeaseKeeper(leases, "instance:a", "a", ttl_s=15, clock=clock)
    assert keeper.hold is None
    await keeper.step()
    first = keeper.hold
    assert first is not None
    clock.advance(5)
    await keeper.step()  # renewed: the same hold
    assert keeper.hold == first
    leases.down = True
    clock.advance(16)  # not renewed: given up, and expired in the store
    await keeper.step()
    assert keeper.hold is None
    leases.down = False
    await keeper.step()  # taken again after the lapse: another hold, though nobody had it in between
    assert keeper.hold is not None and keeper.hold != first


async def test_lease_log_lines_show_the_fencing_number_which_is_no_secret() -> None:
    out, saved = io.StringIO(), structlog.get_config()
    configure_logging("info", fmt="json", stream=out)
    try:
        clock = ManualClock()
        leases = DownableLeases(clock)
        a = LeaseKeeper(leases, "scheduler", "a", ttl_s=15, clock=clock, takeovers=LeaseTakeovers())
        b = LeaseKeeper(leases, "scheduler", "b", ttl_s=15, clock=clock, takeovers=LeaseTakeovers())
        await a.step()
        clock.advance(16)  # a dies; b takes over with the next fencing number
        await b.step()
        structlog.get_logger("agenthub.test").info("secret_check", token="s3cr3t")
    finally:
        structlog.configure(**saved)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    fences = [(line["event"], line.get("fence")) for line in lines if line["event"].startswith("lease_")]
    assert fences == [("lease_gained", 1), ("lease_gained", 2), ("lease_taken_over", 2)], lines
    assert lines[-1]["token"] == "***"  # a field named token is still taken for a secret
