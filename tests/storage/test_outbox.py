"""`PostgresOutbox`: several drainers (each its own pool) claiming at the same moment take each row once; a
withdrawn row is never claimed; a claim past its time fails with the fixed 'unknown' reason, never to be re-sent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest_asyncio

from agenthub.storage.outbox import UNKNOWN_OUTCOME, Outcome
from agenthub.storage.postgres import Database, PostgresOutbox
from tests.support.postgres import migrated

TARGET = "wecom-bot:team"


@pytest_asyncio.fixture
async def outboxes(postgres_dsn: str) -> AsyncIterator[list[PostgresOutbox]]:
    dsn = migrated(postgres_dsn)
    opened = [PostgresOutbox(Database(dsn)) for _ in range(4)]
    yield opened
    for outbox in opened:
        await outbox.database.close()


async def test_drainers_claiming_at_the_same_moment_take_each_row_once(outboxes: list[PostgresOutbox]) -> None:
    rows = [await outboxes[0].put(TARGET, {"chat_id": "c", "text": f"t{i}"}) for i in range(20)]
    await outboxes[0].put("wecom-bot:other", {"chat_id": "c", "text": "not ours"})
    start = asyncio.Event()

    async def drain(outbox: PostgresOutbox, holder: str) -> list[int]:
        await start.wait()
        taken = []
        while (row := await outbox.claim(TARGET, holder, 30)) is not None:
            taken.append(row.row_id)
            await outbox.finish(row.row_id, holder, None)
        return taken

    tasks = [asyncio.create_task(drain(o, f"h{n}")) for n, o in enumerate(outboxes)]
    await asyncio.sleep(0)
    start.set()
    taken = [row for result in await asyncio.gather(*tasks) for row in result]
    assert sorted(taken) == rows  # every row once, none twice, none of another target
    assert {await outboxes[1].outcome(r) for r in rows} == {Outcome("sent")}


async def test_a_withdrawn_row_is_never_claimed_and_a_claimed_one_cannot_be_withdrawn(
    outboxes: list[PostgresOutbox],
) -> None:
    outbox = outboxes[0]
    withdrawn, claimed = await outbox.put(TARGET, {"text": "a"}), await outbox.put(TARGET, {"text": "b"})
    assert await outbox.withdraw(withdrawn, "gave up") is True
    row = await outbox.claim(TARGET, "h", 30)
    assert row is not None and row.row_id == claimed and row.payload == {"text": "b"}
    assert await outbox.withdraw(claimed, "too late") is False
    assert await outbox.claim(TARGET, "h", 30) is None
    assert await outbox.outcome(withdrawn) == Outcome("failed", "gave up")
    await outbox.finish(claimed, "someone else", None)  # only the claimer records the outcome
    assert await outbox.outcome(claimed) == Outcome("claimed")
    await outbox.finish(claimed, "h", "WeCom refused it (errcode 40008)")
    assert await outbox.outcome(claimed) == Outcome("failed", "WeCom refused it (errcode 40008)")
    await outbox.discard(claimed)
    assert await outbox.outcome(claimed) is None


async def test_a_claim_past_its_time_fails_as_unknown_and_is_not_claimed_again(outboxes: list[PostgresOutbox]) -> None:
    outbox = outboxes[0]
    row_id = await outbox.put(TARGET, {"text": "x"})
    assert await outbox.claim(TARGET, "dead holder", 0.2) is not None
    assert await outbox.expire_claims(TARGET) == 0  # still within its claim
    await asyncio.sleep(0.3)
    assert await outboxes[1].expire_claims(TARGET) == 1
    assert await outbox.outcome(row_id) == Outcome("failed", UNKNOWN_OUTCOME)
    assert await outboxes[1].claim(TARGET, "next holder", 30) is None
