"""A session that moves between instances is let go in the statement that writes its turn's answer (PostgreSQL): no
let-go statement of its own, the lease free when the reply goes out, and a message that arrives while that append
is in flight runs under a new claim, in order, answered once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg

from agenthub.messages import DoneEvent
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.postgres import session_lock_held, waiting_for_locks
from tests.support.shared_gateways import (
    HeldModel,
    key_of,
    lease_row,
    message,
    sessions_of,
    shared_instances,
    tag_of,
    user_tags,
)

LEASE_S = 15.0
COLD_START_S = 60.0


async def test_a_moved_turn_lets_its_session_go_with_its_answer_and_sends_no_let_go_of_its_own(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    model = HeldModel(fake_llm)
    model.install()
    model.release.set()
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2, lease_s=LEASE_S) as (a, b):
        assert isinstance(await (await a.send(message("moves", "m1"))).result(), DoneEvent)
        let_gos = sessions_of(b).let_gos.statements
        assert isinstance(await (await b.send(message("moves", "m2"))).result(), DoneEvent)
        assert sessions_of(b).let_gos.statements == let_gos  # it rode the answer's append
        token, free = await lease_row(b, "moves")
        assert free and not b.gateway.session_leases.holds(key_of("moves"))
        assert isinstance(await (await a.send(message("moves", "m3"))).result(), DoneEvent)
        assert (await lease_row(a, "moves"))[0] == token + 1  # granted at once, nobody asked B
        assert user_tags(fake_llm.message_requests()[-1]) == ["m1", "m2", "m3"]


async def test_a_message_queued_while_the_answer_and_its_let_go_are_in_flight_runs_under_a_new_claim_once(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """The let-go is decided before the answer's append; m3 arrives on B while that append waits for the session's
    lock: the session is let go with m2's answer all the same, and m3 claims it again (a newer token), runs after
    m2, never beside it, and is answered and stored once."""
    model = HeldModel(fake_llm)
    model.install()
    model.release.set()
    chat = "queued-ride"
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2, lease_s=LEASE_S) as (a, b):
        assert isinstance(await (await a.send(message(chat, "m1"))).result(), DoneEvent)
        model.release.clear()
        second = await b.send(message(chat, "m2"))
        await fake_llm.wait_for_requests(2, timeout_s=COLD_START_S)  # B holds the lease, its turn is at the model
        granted_to_b, _ = await lease_row(b, chat)
        let_gos = sessions_of(b).let_gos.statements
        async with session_lock_held(postgres_dsn, key_of(chat)):
            model.release.set()
            await waiting_for_locks(postgres_dsn, 1)  # m2's answer (and its let-go) waits for the session's lock
            third = await b.send(message(chat, "m3"))
            await asyncio.sleep(0.2)
            assert not second.finished and not third.finished
        assert isinstance(await second.result(), DoneEvent)
        assert isinstance(await third.result(), DoneEvent)
        assert model.overlaps == []
        assert user_tags(fake_llm.message_requests()[-1]) == ["m1", "m2", "m3"]
        records = await sessions_of(a).load(key_of(chat))
        assert [tag_of(str(r["content"])) for r in records if r["role"] == "user"] == ["m1", "m2", "m3"]
        answers = [str(r["content"]) for r in records if r["role"] == "assistant"]
        assert [[n for n in ("m1", "m2", "m3") if f"answer to {n}" in text] for text in answers] == [
            ["m1"],
            ["m2"],
            ["m3"],
        ]
        assert (await lease_row(b, chat))[0] > granted_to_b  # m3 claimed the session again
        assert sessions_of(b).let_gos.statements == let_gos


async def test_an_answer_whose_append_fails_leaves_the_lease_renewed_and_let_go_after_the_turn(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """The append carrying the let-go fails (its backend killed while it waits for the session's lock): the reply
    goes out (saying the history misses it), the lease, kept renewed again, is let go by its own statement after
    the turn, and the next message, elsewhere, is answered."""
    model = HeldModel(fake_llm)
    model.install()
    model.release.set()
    chat = "failed-ride"
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2, lease_s=LEASE_S) as (a, b):
        assert isinstance(await (await a.send(message(chat, "m1"))).result(), DoneEvent)
        model.release.clear()
        second = await b.send(message(chat, "m2"))
        await fake_llm.wait_for_requests(2, timeout_s=COLD_START_S)
        let_gos = sessions_of(b).let_gos.statements
        async with (
            await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as admin,
            session_lock_held(postgres_dsn, key_of(chat)),
        ):
            model.release.set()
            await waiting_for_locks(postgres_dsn, 1)
            killed = await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND query LIKE %s",
                ["%agenthub_session_append_let_go%"],
            )
            assert await killed.fetchall() == [(True,)]
            final = await second.result()
        assert isinstance(final, DoneEvent), final
        assert sessions_of(b).let_gos.statements == let_gos + 1  # let go the usual way
        assert not b.gateway.session_leases.holds(key_of(chat))
        assert (await lease_row(b, chat))[1]
        assert isinstance(await (await a.send(message(chat, "m3"))).result(), DoneEvent)
        assert user_tags(fake_llm.message_requests()[-1])[-1] == "m3"


async def test_an_instance_whose_returning_sessions_move_on_stops_keeping_them_and_lets_them_go_with_the_answer(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """A session whose turn lands on A again (as A left it) is kept after it while such sessions come back to A;
    when their next turns go to B instead (a round-robin balancer lands a chat's turn where its last one did a
    third of the time), each costs a hand-over, so after a few A stops keeping them: the next one is let go with
    its answer, and its next message, on B, asks nobody for it."""
    model = HeldModel(fake_llm)
    model.install()
    model.release.set()
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2, lease_s=LEASE_S) as (a, b):
        leases = a.gateway.session_leases

        async def moved_to_a_twice(chat: str) -> None:
            for instance, text in ((b, "m1"), (a, "m2"), (a, "m3")):
                assert isinstance(await (await instance.send(message(chat, text))).result(), DoneEvent)

        for n in range(3):  # kept by A after m3, then asked for by B
            await moved_to_a_twice(f"back-{n}")
            assert leases.holds(key_of(f"back-{n}"))
            assert isinstance(await (await b.send(message(f"back-{n}", "m4"))).result(), DoneEvent)
            assert not leases.holds(key_of(f"back-{n}"))
        assert not leases.keeps_returning_sessions
        let_gos = sessions_of(a).let_gos.statements
        await moved_to_a_twice("next")
        assert not leases.holds(key_of("next"))  # let go with m3's answer
        assert sessions_of(a).let_gos.statements == let_gos
        token, free = await lease_row(a, "next")
        assert free
        assert isinstance(await (await b.send(message("next", "m4"))).result(), DoneEvent)
        assert (await lease_row(b, "next"))[0] == token + 1  # one claim: nobody was asked
        assert user_tags(fake_llm.message_requests()[-1]) == ["m1", "m2", "m3", "m4"]
