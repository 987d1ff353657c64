"""Forget and usage rows: the person's id is gone from every usage row (files: journals and roll-ups; PostgreSQL:
`usage_calls` and `usage_days`), their tokens stay, so each chat's, agent's and model's totals are unchanged."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest

from agenthub.clock import system_clock
from agenthub.config import Settings
from agenthub.errors import StorageError
from agenthub.forget.redact import Person
from agenthub.forget.usage import usage_hook
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_services, gateway_forgetter, open_stores
from agenthub.llm.types import CallOwner, LLMRequest, LLMResponse
from agenthub.messages import DoneEvent, ErrorEvent, InboundMessage, Usage
from agenthub.session_keys import SessionKey
from agenthub.storage.postgres import open_database
from agenthub.storage.postgres.usage import PostgresUsageStore
from agenthub.storage.usage import Forgotten, UsageRow, forgotten_tag
from agenthub.storage.usage_files import FileUsageStore
from agenthub.usage.periods import day_of
from agenthub.usage.recorder import NAME_AGAIN_S, UsageRecorder
from agenthub.usage.report import group
from agenthub.usage.spool import SPOOL_DIR, UsageSpool
from tests.support.disks import fill, small_tmpfs
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.gated_pool import GatedPool

PER_CALL = {"input_tokens": 200, "output_tokens": 100}


async def say(gw: GatewayCore, sender: str, chat: str, text: str) -> None:
    assert isinstance(await (await gw.submit(InboundMessage("wecom", chat, sender, text))).result(), DoneEvent)


async def stored_rows(gw: GatewayCore) -> list[UsageRow]:
    assert gw.turn_services.usage is not None
    await gw.turn_services.usage.gate.drain()
    await gw.turn_services.usage.recorder.flush()
    return await gw.turn_services.usage.store.days("2000-01-01", "2100-01-01")


def sums(rows: list[UsageRow]) -> dict[str, object]:
    return {by: sorted(str(line.as_dict()) for line in group(rows, by, "day", {})) for by in ("agent", "model")}


def chat_total(rows: list[UsageRow], chat: str) -> int:
    return sum(r.tokens for r in rows if r.chat_id == chat)


async def naming(settings: Settings, who: str) -> int:
    """How many places in the store still name `who`: lines of the files under data/usage, or table rows."""
    if settings.store.backend == "files":
        root = settings.data_dir / "usage"
        return sum(p.read_text(encoding="utf-8").count(f'"{who}"') for p in root.rglob("*") if p.is_file())
    assert settings.store.dsn is not None
    async with await psycopg.AsyncConnection.connect(settings.store.dsn.get_secret_value()) as conn:
        found = 0
        for table in ("usage_calls", "usage_days"):
            cursor = await conn.execute(
                f"SELECT count(*) FROM {table} WHERE sender_id = %s OR chat_id = %s",
                (who, who),
            )
            row = await cursor.fetchone()
            found += int(row[0]) if row else 0
        return found


async def test_forget_everywhere_leaves_no_usage_row_naming_them_and_every_total_as_it_was(
    backend_settings: Settings, fake_llm: FakeAnthropic
) -> None:
    fake_llm.default_usage = PER_CALL
    stores = await open_stores(backend_settings)
    try:
        async with build_services(backend_settings, stores=stores) as services:
            gw = services.gateway
            await say(gw, "alice", "alice", "in our direct chat")  # a direct chat named by her
            await say(gw, "alice", "g", "in the group")
            await say(gw, "bob", "g", "bob in the group")
            before = await stored_rows(gw)
            assert await naming(backend_settings, "alice") > 0
            report = await gateway_forgetter(services).forget_everywhere(
                [gw.agents.get("default")], Person("wecom", "alice"), actor="t"
            )
            after = await stored_rows(gw)
            assert report.usage_rows > 0
            assert await naming(backend_settings, "alice") == 0
            assert await naming(backend_settings, "bob") > 0  # bob's rows stay his
            assert sums(after) == sums(before)
            assert chat_total(after, "g") == chat_total(before, "g") == 2 * 300
            tag = Person("wecom", "alice").tag
            assert sum(r.tokens for r in after if r.sender_id == tag) == 2 * 300  # her tokens, under her tag
            await say(gw, "bob", "g", "the store still records")
            assert chat_total(await stored_rows(gw), "g") == 3 * 300
    finally:
        await stores.aclose()


async def test_forget_in_a_chat_redacts_that_chats_usage_rows_only(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory()
    fake_llm.default_usage = PER_CALL
    async with build_services(settings) as services:
        gw = services.gateway
        await say(gw, "alice", "g", "in the group")
        await say(gw, "alice", "h", "in another group")
        await stored_rows(gw)
        key = SessionKey("default", "wecom", "g")
        report = await gateway_forgetter(services).forget_in_chat(
            gw.agents.get("default"), key, Person("wecom", "alice")
        )
        rows = await stored_rows(gw)
    assert report.usage_rows == 1
    assert {(r.chat_id, r.sender_id) for r in rows} == {("g", Person("wecom", "alice").tag), ("h", "alice")}


async def test_a_past_days_roll_up_is_redacted_too(settings: Settings) -> None:
    store = FileUsageStore(settings.data_dir)
    row = UsageRow("2020-01-02", "turn", "default", "wecom", "alice", "alice", "m", 10, 5)
    await store.add([row, UsageRow("2020-01-02", "turn", "default", "wecom", "g", "bob", "m", 1, 1)])
    assert len(await store.days("2020-01-01", "2020-01-31")) == 2  # a past day: its roll-up is written now
    rollup = settings.data_dir / "usage" / "2020-01" / "2020-01-02.rollup.json"
    assert rollup.is_file() and "alice" in rollup.read_text(encoding="utf-8")
    who = Forgotten("wecom", "alice", "forgotten-x", ("default",))
    assert await store.forget(who) == 2  # the journal's line and the roll-up's row
    assert "alice" not in rollup.read_text(encoding="utf-8")
    again = await FileUsageStore(settings.data_dir).days("2020-01-01", "2020-01-31")
    assert sorted((r.chat_id, r.sender_id, r.tokens) for r in again) == [
        ("forgotten-x", "forgotten-x", 15),
        ("g", "bob", 2),
    ]


async def test_a_forget_does_not_give_the_person_their_budget_back(
    backend_settings: Settings, fake_llm: FakeAnthropic
) -> None:
    settings = backend_settings.model_copy(
        update={"budgets": backend_settings.budgets.model_copy(update={"user_day": 500})}
    )
    fake_llm.default_usage = PER_CALL
    stores = await open_stores(settings)
    try:
        async with build_services(settings, stores=stores) as services:
            gw = services.gateway
            await say(gw, "alice", "alice", "one")  # 300 of her 500
            await stored_rows(gw)
            await gateway_forgetter(services).forget_everywhere(
                [gw.agents.get("default")], Person("wecom", "alice"), actor="t"
            )
            await say(gw, "alice", "alice", "two")  # 300 (under her tag) + 300: still below at the check
            await stored_rows(gw)
            third = await (await gw.submit(InboundMessage("wecom", "alice", "alice", "three"))).result()
    finally:
        await stores.aclose()
    assert isinstance(third, ErrorEvent) and third.code == "budget_exceeded"


async def test_a_forget_in_a_direct_chat_does_not_give_that_chat_its_budget_back(
    backend_settings: Settings, fake_llm: FakeAnthropic
) -> None:
    """The forget renames the direct chat (named by the person) to their tag too: the chat's own limit still counts
    what was used in it."""
    settings = backend_settings.model_copy(
        update={"budgets": backend_settings.budgets.model_copy(update={"chat_day": 500})}
    )
    fake_llm.default_usage = PER_CALL
    stores = await open_stores(settings)
    try:
        async with build_services(settings, stores=stores) as services:
            gw = services.gateway
            await say(gw, "alice", "alice", "one")  # 300 of the chat's 500
            await stored_rows(gw)
            report = await gateway_forgetter(services).forget_in_chat(
                gw.agents.get("default"), SessionKey("default", "wecom", "alice"), Person("wecom", "alice")
            )
            assert report.usage_rows >= 1
            await say(gw, "alice", "alice", "two")  # 300 (under the tag) + 300: still below at the check
            await stored_rows(gw)
            third = await (await gw.submit(InboundMessage("wecom", "alice", "alice", "three"))).result()
    finally:
        await stores.aclose()
    assert isinstance(third, ErrorEvent) and third.code == "budget_exceeded"
    assert "本会话" in third.message  # the chat's limit, not hers (she has none)


def test_the_usage_stores_tag_is_the_forgets() -> None:
    assert forgotten_tag("wecom", "alice") == Person("wecom", "alice").tag


async def test_a_dead_processs_spool_cannot_bring_a_forgotten_id_back(tmp_path: Path) -> None:
    store = FileUsageStore(tmp_path)
    now = time.time()
    day = day_of(now, ZoneInfo("UTC"))
    row = UsageRow(day, "turn", "default", "wecom", "alice", "alice", "m", 100, 10, 0, 0, calls=1, estimated=0, at=now)
    dead = UsageSpool(tmp_path / SPOOL_DIR)  # a process that stored its row, then was killed before noting it
    dead.append([row])
    await store.add([row])
    dead.close(nothing_waits=False)  # its lock is free, its file stays

    assert await usage_hook(store, spools=tmp_path / SPOOL_DIR)(Person("wecom", "alice"), ["default"], None) > 0
    recorder = UsageRecorder(store, ZoneInfo("UTC"), system_clock, UsageSpool(tmp_path / SPOOL_DIR))
    assert recorder.recover() == 0  # the forget replayed and removed the dead spool
    await recorder.flush()

    assert not [p for p in tmp_path.rglob("*") if p.is_file() and '"alice"' in p.read_text(encoding="utf-8")]  # noqa: ASYNC240
    rows = await store.days(day, day)
    assert sum(r.tokens for r in rows) == 110  # counted once, under the tag
    assert {r.sender_id for r in rows} == {forgotten_tag("wecom", "alice")}


ALICE = ("wecom", "alice")
FORGET_ALICE = Forgotten("wecom", "alice", forgotten_tag("wecom", "alice"), ("default",), None)


async def test_a_forget_whose_names_write_failed_takes_the_name_off_the_disk_when_asked_again(tmp_path: Path) -> None:
    """The disk refused the rewrite of `names.json`: the forget fails, and the name must still be known to the store
    so the forget asked again (the disk has room now) rewrites the file; taken from the cache first, it was never
    written again and came back at the next start."""
    with small_tmpfs(tmp_path / "data") as disk:
        store = FileUsageStore(disk)
        await store.name_senders({ALICE: "Alice Wang", ("wecom", "bob"): "Bob"})
        filler = fill(disk)
        try:
            with pytest.raises(StorageError):
                await store.forget(FORGET_ALICE)
        finally:
            filler.unlink()
        await store.forget(FORGET_ALICE)
        assert "Alice Wang" not in (disk / "usage" / "names.json").read_text(encoding="utf-8")
        assert await FileUsageStore(disk).sender_names([ALICE, ("wecom", "bob")]) == {("wecom", "bob"): "Bob"}


async def test_a_names_write_while_a_cancelled_forgets_rewrite_is_under_way_keeps_the_name_out(tmp_path: Path) -> None:
    """The forget is cancelled while its rewrite of `names.json` is in a worker thread: another person's name
    written meanwhile must not write the forgotten name back from the cache."""
    store = FileUsageStore(tmp_path)
    await store.name_senders({ALICE: "Alice Wang"})
    loop = asyncio.get_running_loop()

    def chooses(func: Any, args: tuple[Any, ...]) -> bool:
        return getattr(func, "__qualname__", "").endswith("FileUsageStore._write_names")

    pool = GatedPool(loop, chooses)
    loop.set_default_executor(pool)
    forget = asyncio.create_task(store.forget(FORGET_ALICE))
    await asyncio.wait_for(pool.started.wait(), 2)
    forget.cancel()
    naming = asyncio.create_task(store.name_senders({("wecom", "bob"): "Bob"}))
    await asyncio.wait([forget, naming], timeout=0.3)
    pool.gate.set()
    await asyncio.wait([forget, naming])
    assert naming.exception() is None
    assert "Alice Wang" not in (tmp_path / "usage" / "names.json").read_text(encoding="utf-8")
    assert await FileUsageStore(tmp_path).sender_names([ALICE, ("wecom", "bob")]) == {("wecom", "bob"): "Bob"}


ALICE_OWNER = CallOwner("default", "wecom", "g", "alice")
ALICE_ASKS = LLMRequest("m", [], [{"role": "user", "content": "q"}], [], 200, purpose="turn", owner=ALICE_OWNER)


def reply(tokens_in: int, tokens_out: int) -> LLMResponse:
    return LLMResponse(
        [{"type": "text", "text": "ok"}], "end_turn", Usage(input_tokens=tokens_in, output_tokens=tokens_out)
    )


@contextlib.asynccontextmanager
async def two_instances(dsn: str, later: list[float]) -> AsyncIterator[tuple[list[Any], UsageRecorder, UsageRecorder]]:
    """Instance A's recorder (it forgets) and instance B's, whose writer only writes when flushed (its clock
    `later[0]` seconds ahead), each on its own pool of the same database."""
    zone = ZoneInfo("UTC")
    databases = [await open_database(dsn) for _ in range(2)]
    here, there = (PostgresUsageStore(db) for db in databases)
    mine = UsageRecorder(here, zone, system_clock)
    theirs = UsageRecorder(there, zone, lambda: time.time() + later[0], gather_s=3600.0)
    try:
        yield databases, mine, theirs
    finally:
        await mine.aclose()
        await theirs.aclose()
        for db in databases:
            await db.close()


async def test_a_row_another_instance_writes_after_a_forget_does_not_bring_the_person_back(postgres_dsn: str) -> None:
    """Instance B holds alice's call (and her name) not yet written when instance A forgets her; B's writer writes
    them a moment later: they name her tag (her tokens still count), her name is not written."""
    async with two_instances(postgres_dsn, [0.0]) as (databases, mine, theirs):
        theirs.watch(ALICE_ASKS, reply(100, 5))  # alice's call on the other instance, just before the forget
        theirs.name("wecom", {"alice": "Alice Wang"})
        await usage_hook(mine.store, mine)(Person("wecom", "alice"), ["default"], None)
        await theirs.flush()  # the other instance's writer, a moment later
        assert await _naming_alice(databases[0]) == (0, 0, 0)
        rows = await mine.store.days("2000-01-01", "2100-01-01")
        assert [(r.sender_id, r.chat_id, r.tokens) for r in rows] == [(forgotten_tag("wecom", "alice"), "g", 105)]


async def test_a_person_who_talks_again_after_a_forget_is_recorded_again(postgres_dsn: str) -> None:
    """After the forget alice talks again, on both instances: those calls are hers. Her name: at once where she
    was forgotten, on the other instance when it tells names again (`NAME_AGAIN_S`)."""
    later = [0.0]
    async with two_instances(postgres_dsn, later) as (databases, mine, theirs):
        theirs.watch(ALICE_ASKS, reply(100, 5))
        theirs.name("wecom", {"alice": "Alice Wang"})
        await theirs.flush()  # both instances knew her name before
        mine.name("wecom", {"alice": "Alice Wang"})
        await mine.flush()
        await usage_hook(mine.store, mine)(Person("wecom", "alice"), ["default"], None)
        assert await _naming_alice(databases[0]) == (0, 0, 0)
        theirs.watch(ALICE_ASKS, reply(7, 3))  # she talks again after the forget
        theirs.name("wecom", {"alice": "Alice Wang"})  # that instance wrote it before: not at once
        await theirs.flush()
        assert await _naming_alice(databases[0]) == (1, 1, 0)
        rows = await mine.store.days("2000-01-01", "2100-01-01")
        assert sorted((r.sender_id, r.tokens) for r in rows) == [("alice", 10), (forgotten_tag("wecom", "alice"), 105)]
        mine.watch(ALICE_ASKS, reply(1, 1))
        mine.name("wecom", {"alice": "Alice Wang"})  # where she was forgotten: written with the call
        await mine.flush()
        assert await _naming_alice(databases[0]) == (2, 1, 1)
        await mine.store.forget(Forgotten("wecom", "alice", forgotten_tag("wecom", "alice"), ("default",)))
        later[0] = NAME_AGAIN_S  # the other instance tells her name again that long after: written
        theirs.name("wecom", {"alice": "Alice Wang"})
        await theirs.flush()
        assert await _naming_alice(databases[0]) == (0, 0, 1)


@pytest.mark.parametrize("backend", ["files", "postgres"])
async def test_a_dead_spool_replayed_after_a_forget_is_not_counted_twice(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A process died after writing alice's call and before noting it in its spool; she is forgotten, then the
    spool is replayed: her stored call (now under her tag) is found, nothing is written again."""
    database = await open_database(request.getfixturevalue("postgres_dsn")) if backend == "postgres" else None
    store: FileUsageStore | PostgresUsageStore = (
        PostgresUsageStore(database) if database is not None else FileUsageStore(tmp_path)
    )
    try:
        row = UsageRow("2026-12-04", "turn", "default", "wecom", "alice", "alice", "m", 100, 5, at=time.time())
        await store.add([row])
        await store.forget(Forgotten("wecom", "alice", forgotten_tag("wecom", "alice"), ("default",)))
        assert await store.unrecorded([row, row]) == [row]  # the one stored is found, a second is missing
    finally:
        if database is not None:
            await database.close()


async def test_a_call_made_before_a_forget_and_written_after_it_names_the_tag_on_files(tmp_path: Path) -> None:
    """In the daemon a call of alice's can end while her forget runs (after its flush): the recorder writes it
    after the forget; the files store writes it under her tag, her name told with it not at all."""
    store = FileUsageStore(tmp_path)
    recorder = UsageRecorder(store, ZoneInfo("UTC"), system_clock, gather_s=3600.0)
    try:
        recorder.watch(ALICE_ASKS, reply(100, 5))
        recorder.name("wecom", {"alice": "Alice Wang"})
        await store.forget(Forgotten("wecom", "alice", forgotten_tag("wecom", "alice"), ("default",)))
        await recorder.flush()
        rows = await store.days("2000-01-01", "2100-01-01")
        assert [(r.sender_id, r.tokens) for r in rows] == [(forgotten_tag("wecom", "alice"), 105)]
        assert await store.sender_names([ALICE]) == {}
        recorder.watch(ALICE_ASKS, reply(7, 3))  # after the forget: hers
        await recorder.flush()
        rows = await store.days("2000-01-01", "2100-01-01")
        assert sorted((r.sender_id, r.tokens) for r in rows) == [("alice", 10), (forgotten_tag("wecom", "alice"), 105)]
    finally:
        await recorder.aclose()


async def _naming_alice(database: Any) -> tuple[int, ...]:
    """Rows of `usage_calls`, `usage_days` and `usage_names` with alice's id."""
    counts = []
    async with database.connection("count what names her") as conn:
        for table in ("usage_calls", "usage_days", "usage_names"):
            found = await (await conn.execute(f"SELECT count(*) FROM {table} WHERE sender_id = 'alice'")).fetchone()
            counts.append(int(found[0]))
    return tuple(counts)


async def test_a_usage_write_waiting_for_a_forget_reads_its_mark(postgres_dsn: str) -> None:
    """A write that starts while a forget's transaction is open (its lock held, its mark not committed) waits, then
    reads the mark: the row names the tag."""
    database = await open_database(postgres_dsn)
    store = PostgresUsageStore(database)
    tag = forgotten_tag("wecom", "alice")
    row = UsageRow("2026-12-04", "turn", "default", "wecom", "g", "alice", "m", 100, 5, at=time.time())
    try:
        async with await psycopg.AsyncConnection.connect(postgres_dsn) as forget, forget.transaction():
            await forget.execute("LOCK TABLE usage_days IN SHARE ROW EXCLUSIVE MODE")  # as `forget` does first
            writing = asyncio.create_task(store.add([row]))
            await asyncio.sleep(0.5)
            assert not writing.done()  # it waits for the forget
            await forget.execute(
                "INSERT INTO usage_forgotten VALUES ('wecom', %s, ARRAY['default'], NULL, clock_timestamp())", (tag,)
            )
        await writing
        assert await _naming_alice(database) == (0, 0, 0)
        assert [(r.sender_id, r.tokens) for r in await store.days("2000-01-01", "2100-01-01")] == [(tag, 105)]
    finally:
        await database.close()


async def test_the_files_forget_marks_outlast_a_restart(tmp_path: Path) -> None:
    """The daemon forgot alice and died with a call of hers made before the forget only in its spool: the next
    start replays it (a new store on the same directory): it names her tag; the marks file names only the tag."""
    made = time.time()
    await FileUsageStore(tmp_path).forget(Forgotten("wecom", "alice", forgotten_tag("wecom", "alice"), ("default",)))
    store = FileUsageStore(tmp_path)  # after the restart
    row = UsageRow(day_of(made, ZoneInfo("UTC")), "turn", "default", "wecom", "alice", "alice", "m", 100, 5, at=made)
    assert await store.unrecorded([row]) == [row]
    await store.add([row])
    rows = await store.days("2000-01-01", "2100-01-01")
    assert [(r.sender_id, r.chat_id, r.tokens) for r in rows] == [(forgotten_tag("wecom", "alice"),) * 2 + (105,)]
    assert "alice" not in (tmp_path / "usage" / "forgotten.json").read_text(encoding="utf-8")
    later = UsageRow(row.day, "turn", "default", "wecom", "alice", "alice", "m", 7, 3, at=time.time() + 1)
    await store.add([later])  # she talks again: hers
    assert ("alice", 10) in [(r.sender_id, r.tokens) for r in await store.days("2000-01-01", "2100-01-01")]
