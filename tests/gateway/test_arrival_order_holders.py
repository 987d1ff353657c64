"""The order check across instances follows the instance that has the earlier message: a later message waits for it
as long as that instance is alive (its `instance:` lease live), however slow it is, and gives up soon after it is
gone, unless a survivor takes the earlier message over (then it goes first)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from agenthub.channel.inbox_flow import HTTP_SOURCE, InstanceInbox
from agenthub.messages import DoneEvent
from agenthub.storage.inbox import InboxEntry, message_to_json
from agenthub.storage.lease import instance_lease
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.shared_gateways import HeldModel, Instance, key_of, message, shared_instances, tag_of

COLD_START_S = 60.0
"""A bound, not a measurement: a process's first turn imports the SDK, slow on a loaded machine."""


async def stored_user_tags(instance: Instance, chat: str) -> list[str]:
    records = await instance.stores.sessions.load(key_of(chat))
    return [tag_of(str(r["content"])) for r in records if r["role"] == "user"]


async def accepted_by(instance: Instance, chat: str, text: str) -> InboxEntry:
    """`text` accepted into the shared inbox by `instance` (its own entry), and not submitted yet."""
    payload = message_to_json(message(chat, text))
    return await instance.submitter.inbox.accept(HTTP_SOURCE, payload, session=str(key_of(chat)))


def gave_up(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["event"] == "arrival_order_gave_up"]


async def warm(instance: Instance) -> None:
    """One turn of another chat: the first turn's imports are not counted in what a test measures."""
    assert isinstance(await (await instance.send(message("warm", "w1"))).result(), DoneEvent)


async def test_a_later_message_waits_longer_than_two_lease_times_for_an_earlier_one_whose_instance_is_alive(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """B accepted m1 and is slow to run it (its loop starved: the turn is submitted 3 lease times later) while its
    liveness lease is kept: A's m2 waits for it however long that takes, so m1 is answered first."""
    lease_s = 1.0
    model = HeldModel(fake_llm)
    model.install()
    model.release.set()
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2, lease_s=lease_s, owned=True) as (a, b):
        await warm(a)
        alive = InstanceInbox(b.submitter.inbox, b.gateway.leases, b.submitter, [])
        await alive.open()
        try:
            entry = await accepted_by(b, "slow", "m1")
            with capture_logs() as logs:
                later = await a.send(message("slow", "m2"))
                await asyncio.sleep(3 * lease_s)
                assert not later.finished, "m2 was answered before the earlier m1"
                earlier = await b.submitter.submit_entry(entry, message("slow", "m1"))
                for handle in (earlier, later):
                    assert isinstance(await handle.result(), DoneEvent)
            assert gave_up(logs) == []
            assert await stored_user_tags(a, "slow") == ["m1", "m2"]
        finally:
            await alive.close()


async def test_a_later_message_gives_up_on_an_earlier_one_soon_after_the_instance_that_has_it_died(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """B accepted m1 and was killed: its liveness lease, last renewed a while ago, runs out and nobody takes m1
    over here (no takeover pass runs). A's m2 waits until the lease is gone and a takeover pass's time more, not
    `2 × lease_s`."""
    lease_s = 2.0
    model = HeldModel(fake_llm)
    model.install()
    model.release.set()
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2, lease_s=lease_s, owned=True) as (a, b):
        await warm(a)
        assert await b.stores.leases.acquire(instance_lease("instance-1"), "instance-1", lease_s / 5) is not None
        await accepted_by(b, "dead", "m1")  # never submitted: B is gone
        loop = asyncio.get_running_loop()
        asked = len(fake_llm.message_requests())
        with capture_logs() as logs:
            sent_at = loop.time()
            later = await a.send(message("dead", "m2"))
            await fake_llm.wait_for_requests(len(fake_llm.requests) + 1, timeout_s=COLD_START_S)
            waited = loop.time() - sent_at
            assert isinstance(await later.result(), DoneEvent)
        assert len(fake_llm.message_requests()) == asked + 1
        assert gave_up(logs) != []
        assert waited < 1.5 * lease_s, f"m2 waited {waited:.2f} s for a dead instance's message"
        assert await stored_user_tags(a, "dead") == ["m2"]


async def test_an_earlier_message_of_a_dead_instance_taken_over_by_the_waiting_one_goes_first(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """B accepted m1 and was killed; A, waiting with m2, takes m1 over at its next takeover pass once B's lease is
    gone: m1 is answered first, and nothing is given up."""
    lease_s = 1.0
    model = HeldModel(fake_llm)
    model.install()
    model.release.set()
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2, lease_s=lease_s, owned=True) as (a, b):
        survivor = InstanceInbox(a.submitter.inbox, a.gateway.leases, a.submitter, [])
        await survivor.open()
        try:
            assert await b.stores.leases.acquire(instance_lease("instance-1"), "instance-1", lease_s) is not None
            await accepted_by(b, "failover", "m1")
            survivor.start()
            with capture_logs() as logs:
                later = await a.send(message("failover", "m2"))
                assert isinstance(await later.result(), DoneEvent)
                await wait_until(lambda: survivor.taken_over == 1)
            assert gave_up(logs) == []
            await wait_until_all_answered(a)
            assert await stored_user_tags(a, "failover") == ["m1", "m2"]
        finally:
            await survivor.close()


async def wait_until(condition: Callable[[], bool], limit_s: float = COLD_START_S) -> None:
    async with asyncio.timeout(limit_s):
        while not condition():  # noqa: ASYNC110 (the takeover pass moves it)
            await asyncio.sleep(0.02)


async def wait_until_all_answered(instance: Instance, limit_s: float = COLD_START_S) -> None:
    """Until the shared inbox holds no unsettled message."""
    async with asyncio.timeout(limit_s):
        while await instance.submitter.inbox.count() > 0:  # noqa: ASYNC110 (the settles land in the database)
            await asyncio.sleep(0.05)


async def test_a_turn_that_waited_for_the_session_still_has_half_its_limit_to_run_after_the_order_wait(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """The order wait is at most half the turn's limit counted from when the turn began, not from when its order
    check did: A's m2 first waits for B to let the session go (B runs m0, longer than half m2's limit), then finds
    m1, B's, not run yet. It gives up on m1 at once and is answered, instead of waiting on until its limit cuts it
    (`timeout`: the message never answered)."""
    lease_s, limit_s = 1.0, 6.0
    model = HeldModel(fake_llm)
    model.install()
    model.release.set()
    session = {"lock_timeout_s": limit_s}
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 2, lease_s=lease_s, owned=True, session=session) as (
        a,
        b,
    ):
        await warm(a)
        await warm(b)
        alive = InstanceInbox(b.submitter.inbox, b.gateway.leases, b.submitter, [])
        await alive.open()
        try:
            model.release.clear()
            first = await b.send(message("capped", "m0"))
            await fake_llm.wait_for_requests(len(fake_llm.requests) + 1, timeout_s=COLD_START_S)
            await accepted_by(b, "capped", "m1")  # B's, alive, not run yet
            with capture_logs() as logs:
                later = await a.send(message("capped", "m2"))
                await asyncio.sleep(limit_s * 2 / 3)  # m2 waits for the session B runs m0 in
                model.release.set()
                assert isinstance(await first.result(), DoneEvent)
                final = await later.result()
            assert isinstance(final, DoneEvent), final
            assert len(gave_up(logs)) == 1
        finally:
            await alive.close()
