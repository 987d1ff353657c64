"""Several gateways (instances) over one PostgreSQL database: a session's turns run on one instance at a time under
its lease, a session moving between instances is reloaded, a late write under a lost lease is refused, and every
session keeps the inbox's arrival order wherever its messages arrive."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agenthub import i18n
from agenthub.channel.inbox_flow import InstanceInbox
from agenthub.clock import ManualClock
from agenthub.errors import SessionBusyError, StorageError
from agenthub.gateway.session_lease import LET_GO_BEFORE_REPLY_S, SessionLeases
from agenthub.messages import DoneEvent, ErrorCode, ErrorEvent
from agenthub.session.history import SessionHistory
from agenthub.storage.lease import InProcessLeases
from agenthub.storage.postgres import Database, PostgresLeases, PostgresSessionStore
from agenthub.storage.postgres.memory_clock import MemoryClock
from agenthub.storage.singleton import InstanceLeases
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.leases import InstanceView, LateGrants
from tests.support.postgres import free_port, waiting_for_locks
from tests.support.shared_gateways import HeldModel, Instance, key_of, message, shared_instances, tag_of, user_tags

SESSIONS = 20
PER_SESSION = 5
LEASE_S = 15.0
COLD_START_S = 60.0
"""A bound, not a measurement: a process's first turn imports the SDK, slow on a loaded machine."""


async def stored_user_tags(instance: Instance, chat: str) -> list[str]:
    records = await instance.stores.sessions.load(key_of(chat))
    return [tag_of(str(r["content"])) for r in records if r["role"] == "user"]


async def advance_until(clock: ManualClock, condition: Callable[[], bool], step: float, limit: float) -> None:
    """Move `clock` by `step` until `condition()` holds (at most `limit`), letting the loop run after each step."""
    moved = 0.0
    while not condition():
        assert moved <= limit, "the condition did not come true in time"
        clock.advance(step)
        moved += step
        for _ in range(20):
            await asyncio.sleep(0.005)  # the renewals and polls woken by the step touch the database


async def test_a_session_moving_between_instances_is_reloaded_so_every_turn_sees_everything_before_it(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2) as (a, b):
        for instance, text in ((a, "m1"), (b, "m2"), (a, "m3")):  # A answers, B the next one, A the third
            final = await (await instance.send(message("moving", text))).result()
            assert isinstance(final, DoneEvent), final
        requests = fake_llm.message_requests()
        assert [user_tags(r) for r in requests] == [["m1"], ["m1", "m2"], ["m1", "m2", "m3"]]
        records = await b.stores.sessions.load(key_of("moving"))
        assert [r["role"] for r in records] == ["user", "assistant"] * 3


async def test_an_instance_that_does_not_hold_a_session_reads_it_from_the_store_not_from_its_cache(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """The messages route (or L3) on A after B answered: what A cached while it held the session is not served."""
    model = HeldModel(fake_llm)
    model.install()
    model.release.set()
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2) as (a, b):
        assert isinstance(await (await a.send(message("read", "m1"))).result(), DoneEvent)
        assert len(await a.gateway.history.load(key_of("read"))) == 2
        assert isinstance(await (await b.send(message("read", "m2"))).result(), DoneEvent)
        async with asyncio.timeout(COLD_START_S):
            while a.gateway.session_leases.holds(key_of("read")):  # noqa: ASYNC110 (A lets it go after its turn)
                await asyncio.sleep(0.01)
        history = await a.gateway.history.load(key_of("read"))
        assert [tag_of(str(r["content"])) for r in history] == ["m1", "answer to m1", "m2", "answer to m2"]
        assert (await a.gateway.history.get_meta(key_of("read"))) is not None


async def test_twenty_sessions_of_five_messages_sent_to_random_instances_keep_arrival_order_and_never_overlap(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    model = HeldModel(fake_llm)
    model.install()
    pick = random.Random(12)
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 3) as instances:
        handles: dict[str, list[Any]] = {}

        async def send_session(s: int) -> None:
            handles[f"s{s}"] = []
            for i in range(PER_SESSION):  # accepted one after another, each by a random instance
                handle = await pick.choice(instances).send(message(f"c{s}", f"s{s}-m{i}"))
                handles[f"s{s}"].append(handle)

        await asyncio.gather(*(send_session(s) for s in range(SESSIONS)))  # every session at the same moment
        await fake_llm.wait_for_requests(SESSIONS, timeout_s=COLD_START_S)  # first turns, held
        model.release.set()  # all answers released together
        finals = [await h.result() for hs in handles.values() for h in hs]
        assert all(isinstance(f, DoneEvent) for f in finals), [f for f in finals if not isinstance(f, DoneEvent)]
        assert model.overlaps == []  # never two instances at the model for one session
        for s in range(SESSIONS):
            assert await stored_user_tags(instances[0], f"c{s}") == [f"s{s}-m{i}" for i in range(PER_SESSION)]
            records = await instances[1].stores.sessions.load(key_of(f"c{s}"))
            assert records[-1]["role"] == "assistant"
            answered = " ".join(str(r["content"]) for r in records if r["role"] == "assistant")
            assert all(f"s{s}-" in word for word in answered.split() if "-m" in word)  # no cross-talk
        for instance in instances:
            await instance.submitter.aclose()
        assert instance.submitter.inbox is not None
        assert await instances[0].submitter.inbox.count() == 0


async def test_messages_submitted_straight_to_random_instances_never_put_two_of_them_at_the_model_for_a_session(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """Not through the inbox (no arrival order to keep): the session lease alone keeps the instances apart."""
    model = HeldModel(fake_llm)
    model.install()
    pick = random.Random(7)
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 3) as instances:
        sent = [(pick.choice(instances), f"c{s}", f"s{s}-m{i}") for i in range(3) for s in range(10)]
        handles = await asyncio.gather(*(i.gateway.submit(message(chat, text)) for i, chat, text in sent))
        await fake_llm.wait_for_requests(10, timeout_s=COLD_START_S)  # one turn per session at the model, held
        await asyncio.sleep(0.2)  # a second instance's request for a session would arrive now (none may)
        model.release.set()
        finals = [await h.result() for h in handles]
        assert all(isinstance(f, DoneEvent) for f in finals), finals
        assert model.overlaps == []
        for s in range(10):
            assert sorted(await stored_user_tags(instances[0], f"c{s}")) == [f"s{s}-m{i}" for i in range(3)]


async def test_a_turn_whose_lease_cannot_be_renewed_is_stopped_and_its_message_is_answered_elsewhere(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """A's turn is cut for its lost lease (a slow store, not a crash): its entry is given up, not settled, so B's
    next takeover pass answers that message itself; the inbox is empty only once it has been answered."""
    clock = ManualClock()
    shared = InProcessLeases(clock=clock)
    views = [InstanceView(shared), InstanceView(shared)]
    model = HeldModel(fake_llm)
    model.install()
    async with (
        shared_instances(
            tmp_path,
            fake_llm,
            postgres_dsn,
            2,
            lease_stores=list(views),
            clocks=[clock, clock],
            lease_s=LEASE_S,
            owned=True,
        ) as (a, b),
        AsyncExitStack() as stack,
    ):
        b_inbox = InstanceInbox(b.submitter.inbox, b.gateway.leases, b.submitter, [])
        stack.push_async_callback(b_inbox.close)
        await b_inbox.open()
        first = await a.send(message("cut", "m1"))
        await fake_llm.wait_for_requests(1, timeout_s=COLD_START_S)
        views[0].down = True  # A can no longer renew (its network to the store is gone)
        await advance_until(clock, lambda: first.finished, LEASE_S / 12, LEASE_S)
        stopped = await first.result()
        assert isinstance(stopped, ErrorEvent) and stopped.code == ErrorCode.LEASE_LOST
        assert stopped.message == i18n.text("abort.lease_lost", i18n.locale_for(a.gateway.settings, "http", None))
        await a.submitter.aclose()  # what A does with the entry once the reply ended is done
        assert await a.submitter.inbox.count() == 1  # given up, not settled: nobody has answered it yet
        model.release.set()
        assert await b_inbox.take_over() == 1  # B's next pass: the given-up entry is B's now
        await advance_until(clock, lambda: len(fake_llm.message_requests()) == 2, LEASE_S / 12, 2 * LEASE_S)
        records = await answered(b, "cut")
        assert [(r["role"], tag_of(str(r["content"]))) for r in records] == [
            ("user", "m1"),
            ("assistant", "answer to m1"),
        ]
        assert user_tags(fake_llm.message_requests()[1]) == ["m1"]  # A's stored message, not a second copy
        await b.submitter.aclose()
        assert await b.submitter.inbox.count() == 0  # settled once answered
        second = await b.send(message("cut", "m2"))
        assert isinstance(await second.result(), DoneEvent)
        assert user_tags(fake_llm.message_requests()[2]) == ["m1", "m2"]
        assert model.overlaps == []


async def answered(instance: Instance, chat: str) -> list[dict[str, Any]]:
    """The session's records once its last one is an answer (read from the store)."""
    async with asyncio.timeout(COLD_START_S):
        while True:
            records = await instance.stores.sessions.load(key_of(chat))
            if records and records[-1]["role"] == "assistant":
                return records
            await asyncio.sleep(0.05)


async def test_a_late_write_of_an_instance_whose_lease_expired_is_refused_and_the_session_goes_on_elsewhere(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """A's process stands still (its clock does not move, its renewals never run) while its lease expires; B takes
    the session over. A's answer, written late under the old lease, is refused whole and not delivered either (the
    user never gets an answer the history does not hold): A's turn ends as a lost lease; B's history goes on."""
    store_clock, frozen = ManualClock(), ManualClock()
    shared = InProcessLeases(clock=store_clock)
    model = HeldModel(fake_llm)
    model.install()
    async with shared_instances(
        tmp_path,
        fake_llm,
        postgres_dsn,
        2,
        lease_stores=[InstanceView(shared), InstanceView(shared)],
        clocks=[frozen, store_clock],
        lease_s=LEASE_S,
    ) as (a, b):
        late = await a.send(message("late", "m1"))
        await fake_llm.wait_for_requests(1, timeout_s=COLD_START_S)
        store_clock.advance(LEASE_S + 1)  # A's lease expired by the store's clock
        taken_over = await b.send(message("late", "m2"))
        await fake_llm.wait_for_requests(2, timeout_s=COLD_START_S)
        model.release.set()  # A's answer and B's come back now
        late_events = [event async for event in late]
        final = late_events[-1]
        assert isinstance(final, ErrorEvent) and final.code == ErrorCode.LEASE_LOST, final
        assert not any(isinstance(e, DoneEvent) for e in late_events)
        assert not any("answer to m1" in getattr(e, "text", "") for e in late_events)  # nothing of the refused answer
        assert isinstance(await taken_over.result(), DoneEvent)
        third = await (await b.send(message("late", "m3"))).result()
        assert isinstance(third, DoneEvent)
        records = await b.stores.sessions.load(key_of("late"))
        assert [(r["role"], tag_of(str(r["content"]))) for r in records] == [
            ("user", "m1"),
            ("user", "m2"),
            ("assistant", "answer to m2"),
            ("user", "m3"),
            ("assistant", "answer to m3"),
        ]


async def test_maintenance_on_one_instance_waits_for_a_turn_running_on_another(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    model = HeldModel(fake_llm)
    model.install()
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2) as (a, b):
        running = await a.send(message("held", "m1"))
        await fake_llm.wait_for_requests(1, timeout_s=COLD_START_S)

        async def note_from_b() -> None:
            async with b.gateway.hold(key_of("held")):  # e.g. a scheduled text delivered by B
                await b.gateway.history.append(key_of("held"), {"role": "assistant", "content": "note from b"})

        noting = asyncio.create_task(note_from_b())
        await asyncio.sleep(0.3)
        assert not noting.done()  # B waits for A's lease
        model.release.set()
        assert isinstance(await running.result(), DoneEvent)
        await asyncio.wait_for(noting, 10)
        records = await a.stores.sessions.load(key_of("held"))
        assert [r["content"] for r in records][1:] == ["answer to m1", "note from b"]


async def test_maintenance_that_needs_an_idle_session_finds_it_busy_while_another_instance_runs_it(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    model = HeldModel(fake_llm)
    model.install()
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2) as (a, b):
        running = await a.send(message("busy", "m1"))
        await fake_llm.wait_for_requests(1, timeout_s=COLD_START_S)
        with pytest.raises(SessionBusyError):  # e.g. AutoCompact on B: skipped, not waited for
            async with b.gateway.exclusive(key_of("busy")):
                pass
        model.release.set()
        assert isinstance(await running.result(), DoneEvent)
        async with asyncio.timeout(COLD_START_S):  # A lets the session go once its worker is done
            while True:
                try:
                    async with b.gateway.exclusive(key_of("busy")):
                        roles = [r["role"] for r in await b.gateway.history.load(key_of("busy"))]
                    break
                except SessionBusyError:
                    await asyncio.sleep(0.05)
        assert roles == ["user", "assistant"]


async def test_a_lease_granted_late_is_renewed_in_time_and_its_turn_goes_on(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """A grant that reaches the instance half a lease late (a loaded database) leaves less of the lease than a
    renewal period: the first renewal is due by the lease's own time, at once, not a third of a lease from now."""
    clock = ManualClock()
    model = HeldModel(fake_llm)
    model.install()
    async with shared_instances(
        tmp_path,
        fake_llm,
        postgres_dsn,
        1,
        lease_stores=[LateGrants(clock, LEASE_S / 2)],
        clocks=[clock],
        lease_s=LEASE_S,
    ) as (a,):
        reply = await a.send(message("late-grant", "m1"))
        await fake_llm.wait_for_requests(1, timeout_s=COLD_START_S)
        for _ in range(24):  # two lease times, in steps a keeper that renews on time never misses
            clock.advance(LEASE_S / 12)
            await asyncio.sleep(0.01)
        assert not reply.finished, "the turn was cut: its lease was given up before any renewal was tried"
        model.release.set()
        assert isinstance(await reply.result(), DoneEvent)


async def lease_token(instance: Instance, chat: str) -> int:
    leases = instance.stores.leases
    assert isinstance(leases, PostgresLeases)
    async with leases.database.connection("read the lease") as conn:
        cursor = await conn.execute("SELECT token FROM leases WHERE name = %s", (f"session:{key_of(chat)}",))
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


async def test_an_instance_keeps_a_session_between_its_turns_and_hands_it_over_the_moment_another_asks(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """A keeps the lease of a session that stays with it (its second turn found nobody else wrote it: the third
    takes no grant, the same token), but B, given the next message, does not wait for A's idle lease to run out:
    it asks, and A lets the session go."""
    model = HeldModel(fake_llm)
    model.install()
    model.release.set()
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2, lease_s=LEASE_S) as (a, b):
        for text in ("m1", "m2"):
            assert isinstance(await (await a.send(message("kept", text))).result(), DoneEvent)
        token = await lease_token(a, "kept")
        assert a.gateway.session_leases.holds(key_of("kept"))  # idle, still held
        assert isinstance(await (await a.send(message("kept", "m3"))).result(), DoneEvent)
        assert await lease_token(a, "kept") == token  # not released and granted again
        loop = asyncio.get_running_loop()
        sent_at = loop.time()
        assert isinstance(await (await b.send(message("kept", "m4"))).result(), DoneEvent)
        assert loop.time() - sent_at < LEASE_S / 4  # handed over when asked, not after A's idle time (LEASE_S / 3)
        assert not a.gateway.session_leases.holds(key_of("kept"))
        assert await lease_token(b, "kept") > token
        assert user_tags(fake_llm.message_requests()[-1]) == ["m1", "m2", "m3", "m4"]


async def test_a_new_session_is_kept_after_its_first_turn_and_handed_over_when_its_next_message_goes_elsewhere(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """Nobody held a new session before A: A keeps its lease after the first turn, so the second takes no grant
    (the same token); when B gets the next message it asks, and A lets the session go at once."""
    model = HeldModel(fake_llm)
    model.install()
    model.release.set()
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2, lease_s=LEASE_S) as (a, b):
        assert isinstance(await (await a.send(message("new", "m1"))).result(), DoneEvent)
        assert a.gateway.session_leases.holds(key_of("new"))  # idle, still held
        token = await lease_token(a, "new")
        assert isinstance(await (await a.send(message("new", "m2"))).result(), DoneEvent)
        assert await lease_token(a, "new") == token  # not released and granted again
        loop = asyncio.get_running_loop()
        sent_at = loop.time()
        assert isinstance(await (await b.send(message("new", "m3"))).result(), DoneEvent)
        assert loop.time() - sent_at < LEASE_S / 4  # handed over when asked, not after A's idle time (LEASE_S / 3)
        assert not a.gateway.session_leases.holds(key_of("new"))
        assert await lease_token(b, "new") > token
        assert user_tags(fake_llm.message_requests()[-1]) == ["m1", "m2", "m3"]


async def _wanted_until_sentinel(dsn: str, ready: asyncio.Event, done: asyncio.Event) -> list[str]:
    """The leases asked for (NOTIFY agenthub_lease_wanted) from when `ready` is set until `done` is, in commit
    order: a sentinel of our own sent at `done` closes the list."""
    asked: list[str] = []
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("LISTEN agenthub_lease_wanted")
        ready.set()
        await done.wait()
        await conn.execute("SELECT pg_notify('agenthub_lease_wanted', 'sentinel')")
        async for notice in conn.notifies(timeout=30.0):
            if notice.payload == "sentinel":
                break
            asked.append(notice.payload)
    return asked


async def test_a_session_that_moves_is_let_go_before_its_reply_so_its_next_message_elsewhere_takes_one_claim(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """B answers a session that came from A: it moves (B keeps no lease for it), so B lets it go before the reply
    goes out. While the lease's row is locked the let-go waits, and the reply with it; the next message, sent on
    the reply to A, is granted at its first claim: nobody is asked for the lease."""
    model = HeldModel(fake_llm)
    model.install()
    model.release.set()
    name = f"session:{key_of('moves')}"
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2, lease_s=LEASE_S) as (a, b):
        assert isinstance(await (await a.send(message("moves", "m1"))).result(), DoneEvent)
        model.release.clear()
        reply = await b.send(message("moves", "m2"))
        await fake_llm.wait_for_requests(2, timeout_s=COLD_START_S)  # B holds the lease, its turn is at the model
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as lock:
            await lock.execute("SELECT 1 FROM leases WHERE name = %s FOR UPDATE", [name])
            model.release.set()
            await asyncio.sleep(0.5)
            assert not reply.finished, "the reply went out before the session was let go"
            await lock.rollback()
        assert isinstance(await reply.result(), DoneEvent)
        assert not b.gateway.session_leases.holds(key_of("moves"))
        ready, done = asyncio.Event(), asyncio.Event()
        listener = asyncio.create_task(_wanted_until_sentinel(postgres_dsn, ready, done))
        await ready.wait()
        assert isinstance(await (await a.send(message("moves", "m3"))).result(), DoneEvent)
        done.set()
        async with asyncio.timeout(30):
            assert await listener == []
        assert user_tags(fake_llm.message_requests()[-1]) == ["m1", "m2", "m3"]


async def test_a_let_go_held_up_in_the_store_delays_the_reply_of_a_moved_turn_only_a_bounded_time(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """The let-go before the reply is waited for at most `LET_GO_BEFORE_REPLY_S`: with the lease's row locked
    (a slow or stuck store) the reply goes out all the same, the let-go goes on behind it and, once the row is free,
    the session is let go; the next message, elsewhere, is answered."""
    model = HeldModel(fake_llm)
    model.install()
    model.release.set()
    name = f"session:{key_of('stuck')}"
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2, lease_s=LEASE_S) as (a, b):
        assert isinstance(await (await a.send(message("stuck", "m1"))).result(), DoneEvent)
        model.release.clear()
        reply = await b.send(message("stuck", "m2"))
        await fake_llm.wait_for_requests(2, timeout_s=COLD_START_S)
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as lock:
            await lock.execute("SELECT 1 FROM leases WHERE name = %s FOR UPDATE", [name])
            model.release.set()
            started = time.monotonic()
            async with asyncio.timeout(LET_GO_BEFORE_REPLY_S + 5.0):
                final = await reply.result()
            assert isinstance(final, DoneEvent), final
            assert time.monotonic() - started < LET_GO_BEFORE_REPLY_S + 5.0
            await lock.rollback()
        assert isinstance(await (await a.send(message("stuck", "m3"))).result(), DoneEvent)
        assert user_tags(fake_llm.message_requests()[-1]) == ["m1", "m2", "m3"]


async def test_a_let_go_that_fails_before_the_reply_leaves_the_reply_whole_and_the_lease_to_expire(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """The let-go statement of B's moved turn fails (its backend killed while it waits for the lease's row): the
    reply goes out whole, without the failure's text, and the session is not lost: the lease expires and A answers
    the next message."""
    model = HeldModel(fake_llm)
    model.install()
    model.release.set()
    name = f"session:{key_of('failing')}"
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2, lease_s=3.0) as (a, b):
        assert isinstance(await (await a.send(message("failing", "m1"))).result(), DoneEvent)
        model.release.clear()
        reply = await b.send(message("failing", "m2"))
        await fake_llm.wait_for_requests(2, timeout_s=COLD_START_S)
        async with (
            await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as admin,
            await psycopg.AsyncConnection.connect(postgres_dsn) as lock,
        ):
            await lock.execute("SELECT 1 FROM leases WHERE name = %s FOR UPDATE", [name])
            model.release.set()
            await waiting_for_locks(postgres_dsn, 1)
            killed = await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND query LIKE %s",
                ["%agenthub_session_let_go%"],
            )
            assert await killed.fetchall() == [(True,)]  # the let-go's statement, and only it
            final = await reply.result()
            await lock.rollback()
        assert isinstance(final, DoneEvent), final
        assert final.full_text == "answer to m2"
        assert not b.gateway.session_leases.holds(key_of("failing"))
        assert isinstance(await (await a.send(message("failing", "m3"))).result(), DoneEvent)
        assert user_tags(fake_llm.message_requests()[-1]) == ["m1", "m2", "m3"]


async def test_a_message_queued_on_the_same_instance_while_its_session_is_let_go_runs_under_a_new_claim(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """B's moved turn lets the session go before its reply; a next message of that session queued on B meanwhile
    (the let-go held up by a locked row) waits for the let-go, then claims the lease again: it runs under a newer
    token, after the earlier turn, never beside it."""
    model = HeldModel(fake_llm)
    model.install()
    model.release.set()
    name = f"session:{key_of('queued')}"
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2, lease_s=LEASE_S) as (a, b):
        assert isinstance(await (await a.send(message("queued", "m1"))).result(), DoneEvent)
        model.release.clear()
        second = await b.send(message("queued", "m2"))
        await fake_llm.wait_for_requests(2, timeout_s=COLD_START_S)
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as lock:
            cursor = await lock.execute("SELECT token FROM leases WHERE name = %s FOR UPDATE", [name])
            row = await cursor.fetchone()
            assert row is not None
            granted_to_b = int(row[0])
            model.release.set()
            await waiting_for_locks(postgres_dsn, 1)  # m2's turn has ended: its let-go waits for the row
            third = await b.send(message("queued", "m3"))  # queued on B while the session is being let go
            assert isinstance(await second.result(), DoneEvent)
            await asyncio.sleep(0.3)
            assert not third.finished  # its claim waits for the let-go in flight
            await lock.rollback()
        assert isinstance(await third.result(), DoneEvent)
        assert model.overlaps == []
        assert user_tags(fake_llm.message_requests()[-1]) == ["m1", "m2", "m3"]
        async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
            cursor = await conn.execute("SELECT token FROM leases WHERE name = %s", [name])
            row = await cursor.fetchone()
            assert row is not None and int(row[0]) > granted_to_b  # m3 claimed the lease again


async def test_an_instance_whose_new_sessions_move_on_stops_keeping_them_so_their_next_message_takes_one_claim(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """A keeps a new session after its first turn while such sessions come back to it; when their next messages
    go to B instead (a round-robin balancer), each costs a hand-over, so after a few A stops keeping them: the
    next new session is let go before its first reply, and its second message, on B, asks nobody for it."""
    model = HeldModel(fake_llm)
    model.install()
    model.release.set()
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2, lease_s=LEASE_S) as (a, b):
        leases = a.gateway.session_leases
        for n in range(3):  # kept by A, then asked for by B
            assert isinstance(await (await a.send(message(f"round-{n}", "m1"))).result(), DoneEvent)
            assert leases.holds(key_of(f"round-{n}"))
            assert isinstance(await (await b.send(message(f"round-{n}", "m2"))).result(), DoneEvent)
            assert not leases.holds(key_of(f"round-{n}"))
        assert not leases.keeps_new_sessions
        assert isinstance(await (await a.send(message("next", "m1"))).result(), DoneEvent)
        assert not leases.holds(key_of("next"))  # let go before the reply
        ready, done = asyncio.Event(), asyncio.Event()
        listener = asyncio.create_task(_wanted_until_sentinel(postgres_dsn, ready, done))
        await ready.wait()
        assert isinstance(await (await b.send(message("next", "m2"))).result(), DoneEvent)
        done.set()
        async with asyncio.timeout(30):
            assert await listener == []
        assert user_tags(fake_llm.message_requests()[-1]) == ["m1", "m2"]


async def test_a_turn_goes_on_while_its_instance_s_event_loop_is_blocked_for_longer_than_its_lease(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """The session's lease is renewed on the renewal lane's own thread: an event loop that gets no turn for more
    than a lease time (a starved host) does not lose it, so the turn is not cut and nothing is handed over."""
    lease_s = 3.0
    model = HeldModel(fake_llm)
    model.install()
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 1, lease_s=lease_s) as (a,):
        reply = await a.send(message("starved", "m1"))
        await fake_llm.wait_for_requests(1, timeout_s=COLD_START_S)
        time.sleep(lease_s * 1.5)  # noqa: ASYNC251 - the point: the loop is blocked longer than the lease lasts
        await asyncio.sleep(0.3)  # a loss the lane reported meanwhile would cut the turn now
        assert not reply.finished, "the turn was cut while its loop was blocked"
        model.release.set()
        assert isinstance(await reply.result(), DoneEvent)


async def test_claims_failing_while_the_database_is_down_leave_nothing_kept_per_session(tmp_path: Path) -> None:
    """Each claim made while the database cannot be reached fails with a StorageError and keeps nothing for its
    session afterwards (no wake-up event per session claimed during an outage, however many sessions that is)."""
    database = Database(f"postgresql://agenthub@127.0.0.1:{free_port()}/agenthub", checkout_timeout_s=0.2)
    store = PostgresLeases(database)
    leases = SessionLeases(
        InstanceLeases(store=store, holder="a", ttl_s=LEASE_S),
        SessionHistory(store=PostgresSessionStore(database, MemoryClock())),
        on_lost=lambda key: None,
    )
    try:
        for n in range(5):
            with pytest.raises(StorageError):
                await leases.claim(key_of(f"down-{n}"))
        assert leases._freed == {}
    finally:
        await leases.close()
        await store.close()
        await database.close()
