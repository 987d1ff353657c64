"""The durable inbox: what `accept` returned survives a restart and a kill, in order, until it is settled."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
import pytest_asyncio

from agenthub.errors import StorageError
from agenthub.messages import Attachment, InboundMessage
from agenthub.storage.inbox import (
    INBOX_FILE,
    FileInbox,
    Inbox,
    InboxEntry,
    InMemoryInbox,
    message_from_json,
    message_to_json,
)
from agenthub.storage.postgres import Database, PostgresInbox
from tests.support.disks import PAGE, fill, small_tmpfs
from tests.support.postgres import fresh_database, migrated

REPO = Path(__file__).resolve().parents[2]
InboxFactory = Callable[[Path], Inbox]


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
    inbox = FileInbox(tmp_path)
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
        os.truncate(filler, filler.stat().st_size - 5 * PAGE)  # room for the new entry once, not twice
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
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, str(tmp_path), cwd=REPO, stdout=asyncio.subprocess.PIPE
    )
    assert child.stdout is not None
    confirmed = -1
    for _ in range(20 + 37 * round_):
        confirmed = int(await asyncio.wait_for(child.stdout.readline(), timeout=30))
    child.send_signal(signal.SIGKILL)
    await child.wait()
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
