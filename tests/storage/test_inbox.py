"""The durable inbox: what `accept` returned survives a restart and a kill, in order, until it is settled."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
import pytest_asyncio

from agenthub.errors import StorageError
from agenthub.messages import Attachment, InboundMessage
from agenthub.storage.inbox import INBOX_FILE, FileInbox, InboxEntry, InMemoryInbox, message_from_json, message_to_json
from agenthub.storage.lease import instance_lease
from agenthub.storage.ports import Inbox
from agenthub.storage.postgres import Database, PostgresInbox, PostgresLeases, open_database
from tests.support.disks import PAGE, fill, room_in_last_page, small_tmpfs
from tests.support.postgres import PostgresServer, fresh_database, migrated
from tests.support.processes import killed_after

REPO = Path(__file__).resolve().parents[2]
InboxFactory = Callable[[Path], Inbox]
RECOVERY_DEADLINE_S = 60.0
CLAIMED = ("wecom:app:a0", "wecom:app:a1")


def _postgres(stack: AsyncExitStack) -> InboxFactory:
    dsn = migrated(stack.enter_context(fresh_database()))

    def open_inbox(data_dir: Path) -> Inbox:
        database = Database(dsn)
        stack.push_async_callback(database.close)  # before the database is dropped: closed last in, first out
        return PostgresInbox(database)

    return open_inbox


FACTORIES: dict[str, Callable[[AsyncExitStack], InboxFactory]] = {
    "files": lambda stack: FileInbox,
    "memory": lambda stack: lambda data_dir: InMemoryInbox(),
    "postgres": _postgres,
}
"""name → factory(exit stack for its resources) of inboxes over one place (a data dir, a database)."""


def message(n: int, chat: str = "c1") -> InboundMessage:
    return InboundMessage(
        channel="wecom", chat_id=chat, sender_id=f"u{n}", content=f"消息 {n}\u0007", message_id=f"m{n}"
    )


@pytest_asyncio.fixture(params=sorted(FACTORIES))
async def make_inbox(request: pytest.FixtureRequest) -> AsyncIterator[InboxFactory]:
    async with AsyncExitStack() as stack:
        yield FACTORIES[str(request.param)](stack)


async def test_accepted_messages_are_listed_in_order_until_settled(tmp_path: Path, make_inbox: InboxFactory) -> None:
    inbox = make_inbox(tmp_path)
    entries = [await inbox.accept("wecom:app", message_to_json(message(n))) for n in range(5)]
    assert [e.payload["message_id"] for e in await inbox.unsettled()] == [f"m{n}" for n in range(5)]
    assert inbox.depth() == 5
    await inbox.settle(entries[1].id)
    await inbox.settle(entries[3].id)
    await inbox.settle(entries[3].id)  # settling twice is harmless
    assert [e.payload["message_id"] for e in await inbox.unsettled()] == ["m0", "m2", "m4"]
    assert inbox.depth() == 3


async def test_a_sessions_earlier_unsettled_entries_are_listed_in_acceptance_order(
    tmp_path: Path, make_inbox: InboxFactory
) -> None:
    inbox = make_inbox(tmp_path)
    first = await inbox.accept("http", {"n": 0}, session="default:http:a")
    pushed = await inbox.accept("wecom:app", {"n": 1})  # a push channel's: its session is known once routed
    elsewhere = await inbox.accept("http", {"n": 2}, session="default:http:b")
    later = await inbox.accept("http", {"n": 3}, session="default:http:a")
    assert first.session == "default:http:a" and pushed.session is None
    assert await inbox.earlier_unsettled("default:http:a", later.id) == [first.id]
    await inbox.assign(pushed.id, "default:http:a")
    await inbox.assign(pushed.id, "default:http:b")  # an entry keeps the session it was given
    await inbox.assign(elsewhere.id, "default:http:a")
    assert await inbox.earlier_unsettled("default:http:a", later.id) == [first.id, pushed.id]
    assert await inbox.earlier_unsettled("default:http:a", first.id) == []
    await inbox.settle(first.id)
    assert await inbox.earlier_unsettled("default:http:a", later.id) == [pushed.id]
    await inbox.settle(later.id)
    assert await inbox.earlier_unsettled("default:http:a", later.id) == []  # settled: nothing waits for it


async def test_fifty_writers_at_the_same_moment_each_get_a_distinct_ordered_entry(
    tmp_path: Path, make_inbox: InboxFactory
) -> None:
    inbox = make_inbox(tmp_path)
    start = asyncio.Event()

    async def writer(n: int) -> str:
        await start.wait()
        return (await inbox.accept("wecom:app", message_to_json(message(n, chat=f"c{n % 7}")))).id

    tasks = [asyncio.create_task(writer(n)) for n in range(50)]
    await asyncio.sleep(0)
    start.set()
    ids = await asyncio.gather(*tasks)
    listed = await inbox.unsettled()
    assert len(set(ids)) == 50
    assert sorted(e.id for e in listed) == sorted(ids)
    assert [e.seq for e in listed] == sorted(e.seq for e in listed)
    await inbox.aclose()


@pytest.mark.parametrize("name", ["files", "postgres"])
async def test_a_reopened_inbox_lists_what_was_accepted_and_not_settled(tmp_path: Path, name: str) -> None:
    async with AsyncExitStack() as stack:
        make = FACTORIES[name](stack)
        first = make(tmp_path)
        sent = [message(n) for n in range(4)]
        entries = [await first.accept(f"wecom:app-{n % 2}", message_to_json(sent[n])) for n in range(4)]
        await first.settle(entries[0].id)
        await first.aclose()
        listed = await make(tmp_path).unsettled()
        assert [(e.id, e.seq, e.source, e.payload) for e in listed] == [
            (e.id, e.seq, e.source, e.payload) for e in entries[1:]
        ]
        assert [message_from_json(e.payload) for e in listed] == sent[1:]


async def test_the_file_inbox_survives_a_restart_with_attachments_and_metadata(tmp_path: Path) -> None:
    original = InboundMessage(
        channel="feishu",
        chat_id="oc_1",
        sender_id="ou_1",
        content="看图",
        message_id="om_1",
        cred_id="bot1",
        metadata={"chat_type": "group", "nested": {"a": [1, 2]}},
        attachments=(Attachment("image", "a.png", "image/png", bytes(range(256))),),
    )
    inbox = FileInbox(tmp_path)
    first = await inbox.accept("feishu:bot1", message_to_json(original))
    done = await inbox.accept("http", message_to_json(message(2)))
    await inbox.settle(done.id)
    await inbox.aclose()
    reopened = FileInbox(tmp_path)
    [entry] = await reopened.unsettled()
    assert entry == first
    assert message_from_json(entry.payload) == original
    later = await reopened.accept("http", message_to_json(message(3)))
    assert later.seq > first.seq  # numbering continues after a restart


async def test_a_compacted_journal_keeps_exactly_the_unsettled_entries(tmp_path: Path) -> None:
    inbox = FileInbox(tmp_path, compact_slack=100)
    kept = []
    for n in range(400):
        entry = await inbox.accept("wecom:app", message_to_json(message(n)))
        if n % 100 == 0:
            kept.append(entry.id)
        else:
            await inbox.settle(entry.id)
    lines = (tmp_path / INBOX_FILE).read_bytes().count(b"\n")
    assert lines < 2 * len(kept) + 110  # compacted, not 760 lines
    reopened = FileInbox(tmp_path)
    assert [e.id for e in await reopened.unsettled()] == kept


async def test_a_compaction_while_an_accept_waits_for_its_write_never_keeps_an_accept_that_failed(
    tmp_path: Path,
) -> None:
    with small_tmpfs(tmp_path / "data") as disk:
        inbox = FileInbox(disk)
        answered = await inbox.accept("http", message_to_json(message(0)))
        await inbox.settle(answered.id)
        filler = fill(disk)
        os.truncate(filler, filler.stat().st_size - 10 * PAGE)  # room for the entry and its commit-log entry once
        big = {"text": "长" * PAGE}  # 3 pages of UTF-8 and its JSON: 4 pages on disk
        accepting = asyncio.create_task(inbox.accept("wecom:app", big))
        compacting = asyncio.create_task(inbox.drop_settled())  # a forget compacts the journal at that moment
        accepted, _ = await asyncio.gather(accepting, compacting, return_exceptions=True)
        await inbox.aclose()
        on_disk = [e.id for e in await FileInbox(disk).unsettled()]
    assert [e.id for e in await inbox.unsettled()] == on_disk  # what the caller was told is what a restart finds
    assert isinstance(accepted, InboxEntry) and on_disk == [accepted.id]  # written once: the room sufficed


async def test_a_torn_tail_and_a_damaged_entry_are_skipped_and_the_next_write_lands(tmp_path: Path) -> None:
    inbox = FileInbox(tmp_path)
    good = await inbox.accept("http", message_to_json(message(1)))
    path = tmp_path / INBOX_FILE
    with path.open("ab") as f:
        f.write(json.dumps({"op": "accept", "id": "bad", "seq": 2, "at": 0, "payload": 1}).encode() + b"\n")
        f.write(b'{"op": "accept", "id": "torn", "se')
    reopened = FileInbox(tmp_path)
    assert [e.id for e in await reopened.unsettled()] == [good.id]
    after = await reopened.accept("http", message_to_json(message(3)))
    assert [e.id for e in await FileInbox(tmp_path).unsettled()] == [good.id, after.id]


async def test_a_refused_write_is_not_accepted(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    os.symlink(tmp_path / "elsewhere.jsonl", data_dir / INBOX_FILE)  # a planted link is refused, never followed
    inbox = FileInbox(data_dir)
    with pytest.raises(StorageError):
        await inbox.accept("http", message_to_json(message(1)))
    assert inbox.depth() == 0
    assert not (tmp_path / "elsewhere.jsonl").exists()


def test_a_stored_message_that_is_not_one_is_refused() -> None:
    good = message_to_json(message(1))
    for broken in (
        {**good, "timestamp": "soon"},
        {**good, "metadata": [1]},
        {k: v for k, v in good.items() if k != "chat_id"},
    ):
        with pytest.raises((ValueError, KeyError, TypeError)):
            message_from_json(broken)
    bad_kind = {**good, "attachments": [{"kind": "virus", "name": "x", "mime_type": "x", "data": ""}]}
    with pytest.raises(ValueError):
        message_from_json(bad_kind)


CHILD = """
import asyncio, sys
from pathlib import Path
from agenthub.messages import InboundMessage
from agenthub.storage.inbox import FileInbox

async def main() -> None:
    inbox = FileInbox(Path(sys.argv[1]))
    n = 0
    while True:
        batch = [InboundMessage("wecom", "c", "u", "x" * (n % 500), message_id=f"{n + i}") for i in range(5)]
        await asyncio.gather(*(inbox.accept("wecom:app", {"n": m.message_id, "text": m.content}) for m in batch))
        print(n + 4, flush=True)
        n += 5

asyncio.run(main())
"""


@pytest.mark.parametrize("round_", range(4))
async def test_what_accept_returned_survives_a_kill_at_a_random_moment(tmp_path: Path, round_: int) -> None:
    confirmed = await killed_after(CHILD, str(tmp_path), 20 + 37 * round_)
    listed = [int(e.payload["n"]) for e in await FileInbox(tmp_path).unsettled()]
    assert set(range(confirmed + 1)) <= set(listed)  # every confirmed accept is there
    assert listed == sorted(listed) and len(listed) == len(set(listed))


async def test_an_accept_cancelled_while_its_write_is_in_flight_keeps_memory_and_file_agreeing(tmp_path: Path) -> None:
    inbox = FileInbox(tmp_path)
    accepting = asyncio.create_task(inbox.accept("http", message_to_json(message(1))))
    await asyncio.sleep(0)  # the journal write is under way in its worker thread
    accepting.cancel()
    await asyncio.wait([accepting])
    await inbox.aclose()
    on_disk = [e.id for e in await FileInbox(tmp_path).unsettled()]
    assert [e.id for e in await inbox.unsettled()] == on_disk
    assert len(on_disk) == 1  # the write landed: the entry is kept, not dropped while still on disk


@pytest_asyncio.fixture
async def instances(postgres_dsn: str) -> AsyncIterator[list[tuple[PostgresInbox, PostgresLeases]]]:
    """Four instances on one database, each its own pool and holder (`i0` … `i3`)."""
    databases = [await open_database(postgres_dsn) for _ in range(4)]
    try:
        yield [(PostgresInbox(db, owner=f"i{n}"), PostgresLeases(db)) for n, db in enumerate(databases)]
    finally:
        for database in databases:
            await database.close()


async def test_a_live_instance_s_entries_are_never_claimed_a_dead_one_s_are_by_source_in_order(
    instances: list[tuple[PostgresInbox, PostgresLeases]],
) -> None:
    (a, a_leases), (b, b_leases), _, _ = instances
    alive = await a_leases.acquire(instance_lease("i0"), "i0", ttl_s=30)
    assert alive is not None and await b_leases.acquire(instance_lease("i1"), "i1", ttl_s=30) is not None
    sources = ["http", "wecom:app:a1", "feishu:f1"]
    entries = [await a.accept(sources[n % 3], {"n": n}) for n in range(9)]
    assert await b.orphan_sources() == set() and await b.claim_orphans(sources) == []
    assert await b.unsettled() == [] and [e.id for e in await a.unsettled()] == [e.id for e in entries]
    await a_leases.release(alive)  # a clean stop, or a lease left to expire: the instance is gone
    assert await b.orphan_sources() == set(sources)
    claimed = await b.claim_orphans(["http", "wecom:app:a1"])
    assert [e.id for e in claimed] == [e.id for e in entries if e.source != "feishu:f1"]  # in seq order
    assert [e.id for e in await b.unsettled()] == [e.id for e in claimed]
    assert [e.id for e in await a.unsettled()] == [e.id for e in entries if e.source == "feishu:f1"]
    assert await b.orphan_sources() == {"feishu:f1"}  # its own entries are not orphans to the claimer
    assert [e.id for e in await b.claim_orphans(sources)] == [e.id for e in entries if e.source == "feishu:f1"]
    assert await b.orphan_sources() == set() and await a.unsettled() == []


async def test_survivors_claiming_at_the_same_moment_each_take_a_distinct_share(
    instances: list[tuple[PostgresInbox, PostgresLeases]],
) -> None:
    (dead, _), *survivors = instances
    for _, leases in survivors:  # the survivors are alive: none of them takes another's share afterwards
        holder = f"i{survivors.index((_, leases)) + 1}"
        assert await leases.acquire(instance_lease(holder), holder, ttl_s=30) is not None
    for round_ in range(5):
        accepted = [await dead.accept(f"wecom:app:a{n % 2}", {"round": round_, "n": n}) for n in range(40)]
        shares = await at_the_same_moment(
            len(survivors) * 2, lambda n: survivors[n % len(survivors)][0].claim_orphans(CLAIMED)
        )
        taken = [e.id for share in shares for e in share]
        assert sorted(taken) == sorted(e.id for e in accepted)  # every one claimed, none twice
        for share in shares:
            assert [e.seq for e in share] == sorted(e.seq for e in share)
        owned = [[e.id for e in await inbox.unsettled()] for inbox, _ in survivors]
        assert sum(len(ids) for ids in owned) == len(accepted) and len({i for ids in owned for i in ids}) == 40
        for inbox, _ in survivors:
            for entry in await inbox.unsettled():
                await inbox.settle(entry.id)


async def at_the_same_moment(count: int, call: Callable[[int], Awaitable[list[InboxEntry]]]) -> list[list[InboxEntry]]:
    start = asyncio.Event()

    async def one(n: int) -> list[InboxEntry]:
        await start.wait()
        return await call(n)

    tasks = [asyncio.create_task(one(n)) for n in range(count)]
    await asyncio.sleep(0)
    start.set()
    return await asyncio.gather(*tasks)


async def test_a_settle_the_full_disk_refused_is_written_once_there_is_room_again(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    with small_tmpfs(disk, size="256k"):
        inbox = FileInbox(disk)
        answered, waiting = [await inbox.accept("http", message_to_json(message(n))) for n in range(2)]
        await fill_the_last_page(inbox, disk / INBOX_FILE, under=30)
        filler = fill(disk)
        with pytest.raises(StorageError):
            await inbox.settle(answered.id)
        assert [e.id for e in await inbox.unsettled() if e.source == "http"] == [waiting.id]  # not listed again
        with pytest.raises(StorageError):
            await inbox.retry_settles()  # the periodic pass, while the disk is still full
        filler.unlink()
        await inbox.retry_settles()
        await inbox.aclose()
        reopened = await FileInbox(disk).unsettled()
        assert [e.id for e in reopened if e.source == "http"] == [waiting.id]  # a restart answers it once only


async def fill_the_last_page(inbox: FileInbox, journal: Path, *, under: int) -> None:
    """Accept padding entries until the journal's last page has fewer than `under` bytes of room.

    An entry's own bytes vary by a few (its sequence number and time stamp), so each aim is measured again, and a
    page with too little room left to aim at is spilled over; a settle record (its 32-hex id alone) needs more.
    """
    pad = 1
    while True:
        size = await asyncio.to_thread(os.path.getsize, journal)
        await inbox.accept("pad", {"x": "y" * pad})
        overhead = await asyncio.to_thread(os.path.getsize, journal) - size - pad
        room = room_in_last_page(journal)
        if room < under:
            return
        pad = room - overhead - under // 2
        if pad < 1:
            pad = room + 1


async def test_a_settle_the_database_refused_is_retried_until_it_is_back(own_postgres_server: PostgresServer) -> None:
    database = await open_database(own_postgres_server.dsn(), checkout_timeout_s=1.0)
    try:
        inbox = PostgresInbox(database, owner="i0")
        answered, waiting = [await inbox.accept("http", {"n": n}) for n in range(2)]
        own_postgres_server.stop()
        with pytest.raises(StorageError):
            await inbox.settle(answered.id)
        own_postgres_server.start()
        deadline = time.monotonic() + RECOVERY_DEADLINE_S
        while await _count_or_none(inbox) != 1:  # nobody asks again: the inbox's own backoff writes it
            assert time.monotonic() < deadline, "the refused settle was never written"
            await asyncio.sleep(0.2)
        assert [e.id for e in await inbox.unsettled()] == [waiting.id]
    finally:
        await inbox.aclose()
        await database.close()


async def _count_or_none(inbox: PostgresInbox) -> int | None:
    try:
        return await inbox.count()
    except StorageError:
        return None


async def test_a_payload_holding_a_lone_surrogate_is_accepted_and_read_back(
    tmp_path: Path, make_inbox: InboxFactory
) -> None:
    """A platform's extras (a sender's name in `metadata`) may hold half a UTF-16 pair: kept escaped, not refused."""
    inbox = make_inbox(tmp_path)
    payload = message_to_json(InboundMessage("wecom", "c1", "u1", "hi", "m1", metadata={"name": "半 \ud800"}))
    entry = await inbox.accept("wecom:app", payload)
    (listed,) = await inbox.unsettled()
    assert listed.id == entry.id and message_from_json(listed.payload).metadata == {"name": "半 \ud800"}
    await inbox.aclose()
