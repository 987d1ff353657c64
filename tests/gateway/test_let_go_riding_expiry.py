"""A riding answer held up longer than the lease's ttl: the lease stays on the renewal lane while it rides, so the
answer is delivered, stored and followed in order."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agenthub.messages import DoneEvent
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.postgres import session_lock_held, waiting_for_locks
from tests.support.shared_gateways import HeldModel, key_of, message, shared_instances

LEASE_S = 3.0
COLD_START_S = 60.0


async def test_an_answer_append_held_up_past_the_ttl_is_still_delivered_and_stored(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    model = HeldModel(fake_llm)
    model.install()
    model.release.set()
    chat = "slow-ride"
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2, lease_s=LEASE_S) as (a, b):
        assert isinstance(await (await a.send(message(chat, "m1"))).result(), DoneEvent)
        model.release.clear()
        second = await b.send(message(chat, "m2"))
        await fake_llm.wait_for_requests(2, timeout_s=COLD_START_S)
        async with session_lock_held(postgres_dsn, key_of(chat)):
            model.release.set()
            await waiting_for_locks(postgres_dsn, 1)  # m2's answer waits for the session's lock
            await asyncio.sleep(LEASE_S + 1.0)  # B's lease is renewed meanwhile (its lane)
            third = await a.send(message(chat, "m3"))
            await asyncio.sleep(1.0)
        final = await second.result()
        assert isinstance(final, DoneEvent), final
        assert isinstance(await third.result(), DoneEvent)


async def test_an_answer_append_queued_behind_a_stuck_batch_past_the_ttl_is_still_delivered(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """m2's riding answer waits behind another session's append stuck on its lock (one append statement in flight
    per store) longer than the ttl: B's lane keeps the lease renewed while it rides, so A's m3 waits for it and
    both are answered."""
    model = HeldModel(fake_llm)
    model.install()
    model.release.set()
    chat, other = "queued-ride", "stuck-other"
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2, lease_s=LEASE_S) as (a, b):
        assert isinstance(await (await a.send(message(chat, "m1"))).result(), DoneEvent)
        assert isinstance(await (await b.send(message(other, "o1"))).result(), DoneEvent)
        assert b.gateway.session_leases.holds(key_of(other))  # a new session, kept
        model.release.clear()
        second = await b.send(message(chat, "m2"))
        await fake_llm.wait_for_requests(3, timeout_s=COLD_START_S)
        async with session_lock_held(postgres_dsn, key_of(other)):
            stuck = await b.send(message(other, "o2"))
            await waiting_for_locks(postgres_dsn, 1)  # o2's user record, in B's append statement, waits
            model.release.set()  # m2's answer (and its let-go) queue behind that statement
            await asyncio.sleep(LEASE_S + 1.0)
            third = await a.send(message(chat, "m3"))
            await asyncio.sleep(1.5)
        final = await second.result()
        third_final = await third.result()
        await stuck.result()
        assert isinstance(final, DoneEvent), final
        assert isinstance(third_final, DoneEvent), third_final


async def test_an_answer_stored_after_a_slow_ride_is_delivered_not_aborted_as_lease_lost(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """As above, nobody else claims the session meanwhile: the lease, renewed while the answer rides, is still B's
    when the answer lands, and the turn is answered (it was aborted as lease lost, its answer stored, when the
    lease left the lane for the ride)."""
    model = HeldModel(fake_llm)
    model.install()
    model.release.set()
    chat, other = "lone-ride", "stuck-other2"
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2, lease_s=LEASE_S) as (a, b):
        assert isinstance(await (await a.send(message(chat, "m1"))).result(), DoneEvent)
        assert isinstance(await (await b.send(message(other, "o1"))).result(), DoneEvent)
        assert b.gateway.session_leases.holds(key_of(other))
        model.release.clear()
        second = await b.send(message(chat, "m2"))
        await fake_llm.wait_for_requests(3, timeout_s=COLD_START_S)
        async with session_lock_held(postgres_dsn, key_of(other)):
            stuck = await b.send(message(other, "o2"))
            await waiting_for_locks(postgres_dsn, 1)
            model.release.set()
            await asyncio.sleep(LEASE_S + 1.0)
            assert not second.finished
        final = await second.result()
        await stuck.result()
        records = await b.stores.sessions.load(key_of(chat))
        stored = [str(r["content"]) for r in records if r["role"] == "assistant" and "m2" in str(r["content"])]
        assert isinstance(final, DoneEvent), (final, stored)
