"""InboxGate: dedup then store before the ack, each chat's answers in arrival order, settled only once answered."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

from agenthub.clock import ManualClock
from agenthub.errors import StorageError
from agenthub.gateway.handle import ReplyHandle
from agenthub.messages import DoneEvent, ErrorCode, ErrorEvent, ReplyEvent, Route
from agenthub.storage.dedup import DedupStore
from agenthub.storage.inbox import FileInbox, InboxEntry, InMemoryInbox
from agenthub.storage.ports import Inbox
from agenthub.storage.postgres import Database, PostgresInbox
from agenthub.storage.postgres.seen import PostgresSeenIds
from channels.toolkit.dedup import MessageDedup
from channels.toolkit.inbox import InboxGate, Intake, Outcome
from channels.toolkit.tasks import TaskSet
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.postgres import migrated


class Recorder:
    """The channel side of a gate: records what it admitted and finished; a chat's first admit can be held."""

    def __init__(self) -> None:
        self.admitted: dict[str, list[str]] = defaultdict(list)
        self.finished: list[tuple[str, Outcome]] = []
        self.hold: dict[str, asyncio.Event] = {}
        self.outcome: Outcome | Callable[[], Outcome] = "answered"
        self.admit_arrived: asyncio.Event = asyncio.Event()

    async def admit(self, entry: InboxEntry) -> Outcome:
        chat, text = entry.payload["chat"], entry.payload["text"]
        gate = self.hold.pop(chat, None)
        if gate is not None:
            await gate.wait()
        self.admitted[chat].append(text)
        self.admit_arrived.set()
        return self.outcome() if callable(self.outcome) else self.outcome

    async def finish(self, entry: InboxEntry, outcome: Outcome) -> None:
        if isinstance(outcome, ReplyHandle):
            await outcome.result()
        self.finished.append((entry.payload["text"], outcome))


def gate_of(
    tmp_path: Path, recorder: Recorder, inbox: Inbox | None = None, *, accepting: bool = True, ready: bool = True
) -> tuple[InboxGate, TaskSet, Inbox]:
    tasks = TaskSet("demo")
    store = inbox if inbox is not None else InMemoryInbox()
    seen = DedupStore(tmp_path / "seen.jsonl", ttl_s=60, clock=ManualClock())
    gate = InboxGate(
        inbox=store,
        source="demo:c",
        dedup=MessageDedup(seen, channel="demo", cred_id="c"),
        tasks=tasks,
        gateway=ScriptedSubmitter(accepting=accepting),
        admit=recorder.admit,
        finish=recorder.finish,
        deferred_text="later",
        ready=ready,
    )
    return gate, tasks, store


async def test_a_gate_not_yet_open_admits_nothing_and_then_its_resumed_entries_before_what_arrived_meanwhile(
    tmp_path: Path,
) -> None:
    recorder = Recorder()
    gate, tasks, inbox = gate_of(tmp_path, recorder, ready=False)  # its channel is starting
    left = [await inbox.accept("demo:c", {"chat": "a", "text": f"old{n}"}) for n in range(3)]
    gate.resume(left, lambda entry: str(entry.payload["chat"]))
    assert (
        await gate.take("new-1", Route("demo", "a"), {"chat": "a", "text": "new"}) is Intake.ACCEPTED
    )  # during the start
    for _ in range(20):
        await asyncio.sleep(0)
    assert recorder.admitted["a"] == []  # nothing is answered before the channel can
    gate.open()
    await tasks.join()
    assert recorder.admitted["a"] == ["old0", "old1", "old2", "new"]


async def test_messages_arriving_at_once_are_answered_in_each_chats_order(tmp_path: Path) -> None:
    recorder = Recorder()
    gate, tasks, inbox = gate_of(tmp_path, recorder)
    release = recorder.hold["a"] = asyncio.Event()  # chat a's first message is slow (a download)
    takes = [
        gate.take(f"{chat}-{n}", Route("demo", chat), {"chat": chat, "text": f"{chat}{n}"})
        for n in range(20)
        for chat in "ab"
    ]
    assert await asyncio.gather(*takes) == [Intake.ACCEPTED] * 40
    while len(recorder.admitted["b"]) < 20:  # the other chat goes on meanwhile
        recorder.admit_arrived.clear()
        await recorder.admit_arrived.wait()
    assert recorder.admitted["a"] == []
    release.set()
    await tasks.join()
    assert recorder.admitted == {"a": [f"a{n}" for n in range(20)], "b": [f"b{n}" for n in range(20)]}
    assert inbox.depth() == 0


async def test_a_redelivery_is_not_stored_twice(tmp_path: Path) -> None:
    recorder = Recorder()
    gate, tasks, _ = gate_of(tmp_path, recorder)
    intakes = await asyncio.gather(
        *(gate.take("m-1", Route("demo", "a"), {"chat": "a", "text": "once"}) for _ in range(10))
    )
    assert sorted(i.value for i in intakes) == ["accepted"] + ["duplicate"] * 9
    await tasks.join()
    assert recorder.admitted == {"a": ["once"]}


async def test_a_refused_store_is_not_remembered_by_the_dedup(tmp_path: Path) -> None:
    recorder = Recorder()
    data_dir = tmp_path / "data"
    gate, tasks, _ = gate_of(tmp_path, recorder, FileInbox(data_dir, fsync=False))
    data_dir.write_text("a file where the data directory should be")
    assert await gate.take("m-1", Route("demo", "a"), {"chat": "a", "text": "x"}) is Intake.REFUSED
    data_dir.unlink()
    assert (
        await gate.take("m-1", Route("demo", "a"), {"chat": "a", "text": "x"}) is Intake.ACCEPTED
    )  # the platform's retry
    assert await gate.take("m-1", Route("demo", "a"), {"chat": "a", "text": "x"}) is Intake.DUPLICATE
    await tasks.join()
    assert recorder.admitted == {"a": ["x"]}


async def test_a_turn_cut_by_the_shutdown_stays_for_the_restart_and_an_answered_one_is_settled(
    tmp_path: Path,
) -> None:
    recorder = Recorder()
    gate, tasks, inbox = gate_of(tmp_path, recorder)
    endings: Iterator[ReplyEvent] = iter([ErrorEvent("restarting", code=ErrorCode.SHUTDOWN), DoneEvent("fine")])

    def handle() -> ReplyHandle:
        h = ReplyHandle("demo")
        h.emit(next(endings))
        return h

    recorder.outcome = handle
    await gate.take("m-1", Route("demo", "a"), {"chat": "a", "text": "cut"})
    await gate.take("m-2", Route("demo", "a"), {"chat": "a", "text": "done"})
    await tasks.join()
    assert [e.payload["text"] for e in await inbox.unsettled()] == ["cut"]


async def test_a_message_during_the_drain_gets_the_deferred_text_and_stays(tmp_path: Path) -> None:
    recorder = Recorder()
    gate, tasks, inbox = gate_of(tmp_path, recorder, accepting=False)
    await gate.take("m-1", Route("demo", "a"), {"chat": "a", "text": "later please"})
    await tasks.join()
    assert recorder.admitted == {}
    assert recorder.finished == [("later please", "later")]
    assert inbox.depth() == 1


async def test_a_cancelled_answer_stays_and_a_failed_one_is_settled(tmp_path: Path) -> None:
    recorder = Recorder()
    gate, tasks, inbox = gate_of(tmp_path, recorder)
    recorder.hold["a"] = asyncio.Event()  # never released: the process stops under it
    await gate.take("m-1", Route("demo", "a"), {"chat": "a", "text": "cut off"})
    await asyncio.sleep(0)
    await tasks.close(0)
    assert inbox.depth() == 1

    def broken() -> Outcome:
        raise ValueError("a poison message")

    recorder.outcome = broken
    gate, tasks, inbox = gate_of(tmp_path / "2", recorder)
    await gate.take("m-2", Route("demo", "b"), {"chat": "b", "text": "poison"})
    await tasks.join()
    assert inbox.depth() == 0  # not failed again after every restart


async def test_resume_answers_entries_in_seq_order_per_chat(tmp_path: Path) -> None:
    recorder = Recorder()
    stored = InMemoryInbox()
    entries = [await stored.accept("demo:c", {"chat": c, "text": f"{c}{n}"}) for n in range(5) for c in "ab"]
    gate, tasks, _ = gate_of(tmp_path, recorder, stored)
    gate.resume(reversed(entries), lambda e: str(e.payload["chat"]))
    await tasks.join()
    assert recorder.admitted == {"a": [f"a{n}" for n in range(5)], "b": [f"b{n}" for n in range(5)]}
    assert stored.depth() == 0


async def test_a_take_cancelled_while_its_message_is_stored_still_answers_it(tmp_path: Path) -> None:
    """A dying long connection cancels its reader inside `take`: the store it started still lands (the platform
    will not send that id again: dedup has it), so the message must be answered, not left for a restart."""
    recorder = Recorder()
    gate, tasks, inbox = gate_of(tmp_path, recorder, FileInbox(tmp_path / "data"))
    taking = asyncio.create_task(gate.take("k1", Route("demo", "a"), {"chat": "a", "text": "hello"}))
    for _ in range(3):  # into the dedup write and the inbox write, both in worker threads
        await asyncio.sleep(0)
    taking.cancel()
    await asyncio.wait([taking])
    await tasks.join()
    assert recorder.admitted["a"] == ["hello"]
    assert inbox.depth() == 0
    assert await FileInbox(tmp_path / "data").unsettled() == []  # settled on disk too


class RefusingInbox(InMemoryInbox):
    """An inbox whose disk (or database) refuses every write."""

    async def accept(self, source: str, payload: dict[str, object], *, session: str | None = None) -> InboxEntry:
        raise StorageError("could not write the journal")


def _plain_gate(seen: DedupStore | PostgresSeenIds, inbox: Inbox) -> InboxGate:
    recorder = Recorder()
    return InboxGate(
        inbox=inbox,
        source="demo:c",
        dedup=MessageDedup(seen, channel="demo", cred_id="c"),
        tasks=TaskSet("demo"),
        gateway=ScriptedSubmitter(),
        admit=recorder.admit,
        finish=recorder.finish,
        deferred_text="later",
    )


async def test_a_refused_message_is_new_again_for_the_next_process(tmp_path: Path) -> None:
    refused = _plain_gate(DedupStore(tmp_path / "seen.jsonl", ttl_s=600), RefusingInbox())
    assert (
        await refused.take("m1", Route("demo", "chat"), {"chat": "chat", "text": "hi"}) is Intake.REFUSED
    )  # no ack: a retry
    restarted = _plain_gate(DedupStore(tmp_path / "seen.jsonl", ttl_s=600), InMemoryInbox())
    assert await restarted.take("m1", Route("demo", "chat"), {"chat": "chat", "text": "hi"}) is Intake.ACCEPTED


async def test_a_message_refused_on_one_instance_is_new_on_another(postgres_dsn: str) -> None:
    first, second = Database(migrated(postgres_dsn)), Database(postgres_dsn)
    try:
        refused = _plain_gate(PostgresSeenIds(first, "demo/x", ttl_s=600), RefusingInbox())
        other = _plain_gate(PostgresSeenIds(second, "demo/x", ttl_s=600), InMemoryInbox())
        assert await refused.take("m1", Route("demo", "chat"), {"chat": "chat", "text": "hi"}) is Intake.REFUSED
        assert (
            await other.take("m1", Route("demo", "chat"), {"chat": "chat", "text": "hi"}) is Intake.ACCEPTED
        )  # behind the LB
    finally:
        await first.close()
        await second.close()


async def test_a_turn_cut_for_a_lost_lease_is_given_up_to_a_takeover_not_settled(
    tmp_path: Path, postgres_dsn: str
) -> None:
    database = Database(migrated(postgres_dsn))
    try:
        recorder = Recorder()
        gate, tasks, inbox = gate_of(tmp_path, recorder, PostgresInbox(database, owner="instance-a"))

        def cut() -> ReplyHandle:
            h = ReplyHandle("demo")
            h.emit(ErrorEvent("moved", code=ErrorCode.LEASE_LOST))
            return h

        recorder.outcome = cut
        await gate.take("m-1", Route("demo", "a"), {"chat": "a", "text": "cut"})
        await tasks.join()
        assert await inbox.count() == 1  # not settled: nobody has answered it
        assert await inbox.unsettled() == []  # and no longer this instance's
        claimed = await PostgresInbox(database, owner="instance-b").claim_orphans(["demo:c"])
        assert [e.payload["text"] for e in claimed] == ["cut"]  # the next takeover pass answers it
    finally:
        await database.close()
