"""The files inbox's journal as one more file of the histories' commit log: an accept, a settle and the history lines
waiting at the same moment share one batch (one log write, one fdatasync), and what the log acknowledged is back in
the journal after a power cut lost its unsynced tail, also between an accept and its user record."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agenthub.gateway.inbox_replay import INBOX_ID, stored_messages
from agenthub.session_keys import session_key
from agenthub.storage.commit_log import LOG_FILE, _entries
from agenthub.storage.files import FileSessionStore
from agenthub.storage.inbox import INBOX_FILE, FileInbox
from agenthub.storage.session_files import ROOT
from tests.support.processes import killed_after

KEYS = [session_key("default", "http", f"c{i}") for i in range(30)]


def _user(text: str, inbox_id: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": 1, "channel": "http", INBOX_ID: inbox_id}


def _history_file(data: Path, n: int) -> Path:
    return data / "default" / "sessions" / (KEYS[n].file_stem + ".jsonl")


def _power_cut(path: Path, keep: int = 0) -> None:
    """What a power cut does to a file never synced since its first `keep` bytes: the rest is gone."""
    path.write_bytes(path.read_bytes()[:keep])


async def _accept_and_store(inbox: FileInbox, store: FileSessionStore, n: int) -> str:
    """One HTTP turn's first half: the request accepted, then its user record appended."""
    entry = await inbox.accept("http", {"chat_id": KEYS[n].chat_id, "content": f"m{n}"}, session=str(KEYS[n]))
    await store.append(KEYS[n], [_user(f"m{n}", entry.id)])
    return entry.id


async def test_accepts_settles_and_appends_of_many_sessions_share_the_log_s_batches(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, fsync=True)
    inbox = FileInbox(tmp_path, writer=store.writer)
    await _accept_and_store(inbox, store, 0)  # the first batch: recovery and the log's creation
    before = store.writer.batches
    ids = await asyncio.gather(*(_accept_and_store(inbox, store, n) for n in range(1, 30)))
    await asyncio.gather(*(inbox.settle(i) for i in ids[:10]))
    # 29 accepts, 29 appends and 10 settles: a handful of batches, not 68 writes and syncs
    assert store.writer.batches - before <= 6
    found, _ = _entries((tmp_path / LOG_FILE).read_bytes())
    inbox_entries = [item for item, _ in found if item.agent == ROOT]
    assert len(inbox_entries) == 1 + 29 + 10 and {item.stem for item in inbox_entries} == {INBOX_FILE}
    assert [e.id for e in await inbox.unsettled()][1:] == ids[10:]


async def test_a_power_cut_between_the_accept_and_the_user_record_keeps_the_accept(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, fsync=True)
    inbox = FileInbox(tmp_path, writer=store.writer)
    answered = await _accept_and_store(inbox, store, 0)
    await store.append(KEYS[0], [{"role": "assistant", "content": "answer", "timestamp": 2}])
    await inbox.settle(answered)
    waiting = await inbox.accept("http", {"content": "second"}, session=str(KEYS[0]))  # the crash comes now
    _power_cut(tmp_path / INBOX_FILE)  # neither the journal nor the history was synced on its own
    _power_cut(_history_file(tmp_path, 0))
    for _ in range(2):  # a second start (a crash during the first recovery) changes nothing
        restarted = FileSessionStore(tmp_path, fsync=True)
        reopened = FileInbox(tmp_path, writer=restarted.writer)
        assert [e.id for e in await reopened.unsettled()] == [waiting.id]  # answered once: only the second waits
        history = await restarted.load(KEYS[0])
        assert [r["content"] for r in history] == ["m0", "answer"]
        assert stored_messages(history, [waiting.id]) == {}  # its turn runs: no user record of it yet


async def test_a_power_cut_after_the_user_record_resumes_the_turn_without_storing_it_twice(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, fsync=True)
    inbox = FileInbox(tmp_path, writer=store.writer)
    ids = await asyncio.gather(*(_accept_and_store(inbox, store, n) for n in range(5)))
    for path in [tmp_path / INBOX_FILE, *(_history_file(tmp_path, n) for n in range(5))]:
        _power_cut(path)
    restarted = FileSessionStore(tmp_path, fsync=True)
    reopened = FileInbox(tmp_path, writer=restarted.writer)
    assert [e.id for e in await reopened.unsettled()] == ids  # in acceptance order
    for n, entry_id in enumerate(ids):
        stored = stored_messages(await restarted.load(KEYS[n]), [entry_id])
        assert entry_id in stored and stored[entry_id].answer is None  # stored, unanswered: runs once, not stored again


async def test_a_compaction_checkpoints_first_so_no_older_record_is_replayed_onto_the_new_journal(
    tmp_path: Path,
) -> None:
    store = FileSessionStore(tmp_path, fsync=True)
    inbox = FileInbox(tmp_path, writer=store.writer)
    ids = [await _accept_and_store(inbox, store, n) for n in range(4)]
    for entry_id in ids[:3]:
        await inbox.settle(entry_id)
    await inbox.drop_settled()  # the journal now holds only ids[3], synced
    compacted = (tmp_path / INBOX_FILE).stat().st_size
    later = await inbox.accept("http", {"content": "later"})
    found, _ = _entries((tmp_path / LOG_FILE).read_bytes())
    assert [item.agent for item, _ in found] == [ROOT]  # only the accept after the compaction
    _power_cut(tmp_path / INBOX_FILE, keep=compacted + 7)  # the later accept's record torn
    reopened = FileInbox(tmp_path, writer=FileSessionStore(tmp_path, fsync=True).writer)
    assert [e.id for e in await reopened.unsettled()] == [ids[3], later.id]


async def test_an_inbox_opened_on_its_own_replays_the_log_before_it_reads_the_journal(tmp_path: Path) -> None:
    store = FileSessionStore(tmp_path, fsync=True)
    inbox = FileInbox(tmp_path, writer=store.writer)
    entry = await inbox.accept("wecom:app", {"text": "x"})
    _power_cut(tmp_path / INBOX_FILE)
    assert [e.id for e in await FileInbox(tmp_path).unsettled()] == [entry.id]


CHILD = """
import asyncio, sys
from pathlib import Path
from agenthub.session_keys import session_key
from agenthub.storage.files import FileSessionStore
from agenthub.storage.inbox import FileInbox

async def turn(inbox, store, n):
    key = session_key("default", "http", f"c{n % 7}")
    entry = await inbox.accept("http", {"n": n}, session=str(key))
    await store.append(key, [{"role": "user", "content": str(n), "timestamp": 1, "inbox_id": entry.id}])
    if n % 3 == 0:
        await inbox.settle(entry.id)

async def main() -> None:
    store = FileSessionStore(Path(sys.argv[1]), fsync=True)
    inbox = FileInbox(Path(sys.argv[1]), writer=store.writer)
    n = 0
    while True:
        await asyncio.gather(*(turn(inbox, store, n + i) for i in range(7)))
        print(n + 6, flush=True)
        n += 7

asyncio.run(main())
"""


@pytest.mark.parametrize("round_", range(3))
async def test_what_was_acknowledged_survives_a_kill_at_a_random_moment(tmp_path: Path, round_: int) -> None:
    confirmed = await killed_after(CHILD, str(tmp_path), 10 + 23 * round_)
    store = FileSessionStore(tmp_path, fsync=True)
    listed = [int(e.payload["n"]) for e in await FileInbox(tmp_path, writer=store.writer).unsettled()]
    assert {n for n in range(confirmed + 1) if n % 3} <= set(listed)  # every acknowledged, unsettled accept
    assert not {n for n in range(confirmed + 1) if n % 3 == 0} & set(listed)  # no acknowledged settle undone
    assert listed == sorted(listed) and len(listed) == len(set(listed))
    stored = [int(r["content"]) for c in range(7) for r in await store.load(session_key("default", "http", f"c{c}"))]
    assert set(range(confirmed + 1)) <= set(stored) and len(stored) == len(set(stored))  # each record once
