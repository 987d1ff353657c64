"""Whether an instance keeps its sessions after a turn, before any verdict (PostgreSQL): alone it keeps them
(nothing else can take them); started among other live instances (their `instance:` leases) it lets them go with
their answers, so a session's next message on another instance asks nobody, and only its probes (every eighth
session) are kept until they come back; then it keeps them again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest_asyncio

from agenthub.errors import StorageError
from agenthub.gateway.keep_judge import FIRST_ANSWER_WAIT_S, PROBE_EVERY, KeepJudge, KeepJudges
from agenthub.gateway.session_lease import SessionLeases
from agenthub.messages import DoneEvent
from agenthub.storage.lease import Lease, instance_lease
from agenthub.storage.postgres import Database, PostgresLeases
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.scheduler import until
from tests.support.shared_gateways import HeldModel, Instance, key_of, lease_row, message, sessions_of, shared_instances

LEASE_S = 15.0
SHORT_LEASE_S = 6.0
"""Who is alive is asked every 2 s."""


@dataclass
class Alive:
    """The `instance:` leases of some holders, held as their inbox's liveness keeper holds them."""

    leases: PostgresLeases
    held: dict[str, Lease]

    async def gone(self, holder: str) -> None:
        await self.leases.release(self.held.pop(holder))


def answering(fake: FakeAnthropic) -> None:
    """The fake model answering every turn at once (its held model, released)."""
    model = HeldModel(fake)
    model.install()
    model.release.set()


@asynccontextmanager
async def two_instances(
    tmp_path: Path, fake: FakeAnthropic, dsn: str, *alive_holders: str, lease_s: float = LEASE_S
) -> AsyncIterator[tuple[Instance, Instance, Alive]]:
    """Two instances answering at once, the `instance:` leases of `alive_holders` held until the end."""
    answering(fake)
    async with shared_instances(tmp_path, fake, dsn, 2, lease_s=lease_s) as (a, b):
        alive = Alive(PostgresLeases(sessions_of(a).database), {})
        for holder in alive_holders:
            lease = await alive.leases.acquire(instance_lease(holder), holder, lease_s)
            assert lease is not None
            alive.held[holder] = lease
        try:
            yield a, b, alive
        finally:
            for holder in list(alive.held):
                await alive.gone(holder)


class HeldAnswers(PostgresLeases):
    """The database's leases; who is alive told once `answer` is set (a loaded database), `down`: a StorageError."""

    def __init__(self, database: Database) -> None:
        super().__init__(database)
        self.answer = asyncio.Event()
        self.down = False

    async def live_holders(self, prefix: str) -> list[str]:
        await self.answer.wait()
        if self.down:
            raise StorageError("could not list the live leases: unavailable")
        return await super().live_holders(prefix)


@pytest_asyncio.fixture
async def other_alive(postgres_dsn: str) -> AsyncIterator[HeldAnswers]:
    """The database with the `instance:` lease of `instance-1` held before any instance starts."""
    database = Database(postgres_dsn)
    leases = HeldAnswers(database)
    try:
        assert await leases.acquire(instance_lease("instance-1"), "instance-1", LEASE_S) is not None
        yield leases
    finally:
        await leases.close()
        await database.close()


async def answered(instance: Instance, chat: str, text: str) -> None:
    assert isinstance(await (await instance.send(message(chat, text))).result(), DoneEvent)


async def started_among_others(instance: Instance) -> SessionLeases:
    """The instance's session leases once its first claim had it ask who is alive, and it heard of another."""
    leases = instance.gateway.session_leases
    await answered(instance, "first", "m1")
    await until(lambda: not leases.keeps_new_sessions)
    return leases


async def test_an_instance_started_among_others_lets_its_new_sessions_go_so_their_next_message_claims_once(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    async with two_instances(tmp_path, fake_llm, postgres_dsn, "instance-0", "instance-1") as (a, b, _):
        leases = await started_among_others(a)
        assert not leases.keeps_returning_sessions
        await answered(a, "next", "m1")
        assert not leases.holds(key_of("next"))  # let go with its answer
        token, free = await lease_row(a, "next")
        assert free
        await answered(b, "next", "m2")
        assert (await lease_row(b, "next"))[0] == token + 1  # one claim: nobody was asked


async def test_an_instance_started_among_others_asks_who_is_alive_at_its_start_and_lets_its_first_session_go(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str, other_alive: HeldAnswers
) -> None:
    """Asked when the gateway starts, not at its first claim: the very first session is judged by the answer."""
    answering(fake_llm)
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 1, lease_s=LEASE_S) as (a,):
        leases = a.gateway.session_leases
        await until(lambda: leases.peers_asked > 0)  # before any message
        assert not leases.keeps_new_sessions and not leases.keeps_returning_sessions
        await answered(a, "first", "m1")
        assert not leases.holds(key_of("first"))  # let go with its answer
        assert (await lease_row(a, "first"))[1]


async def test_the_first_claim_after_a_start_waits_for_the_answer_of_who_is_alive_while_it_is_out(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str, other_alive: HeldAnswers
) -> None:
    answering(fake_llm)
    async with shared_instances(tmp_path, fake_llm, postgres_dsn, 1, lease_stores=[other_alive], lease_s=LEASE_S) as (
        a,
    ):
        reply = await a.send(message("first", "m1"))
        await asyncio.sleep(FIRST_ANSWER_WAIT_S / 4)
        assert not fake_llm.message_requests()  # its claim waits for the answer
        other_alive.answer.set()
        assert isinstance(await reply.result(), DoneEvent)
        assert not a.gateway.session_leases.holds(key_of("first"))  # let go: another instance is alive


async def test_the_first_ask_failing_or_unanswered_holds_a_claim_no_longer(other_alive: HeldAnswers) -> None:
    """A store that errs releases the wait at once (each kind goes on as it was); one that does not answer holds it
    `FIRST_ANSWER_WAIT_S`; nothing is waited for where nothing asks."""
    failing = KeepJudges(other_alive, "instance-0", LEASE_S)
    silent = KeepJudges(HeldAnswers(other_alive.database), "instance-0", LEASE_S)
    loop = asyncio.get_running_loop()
    try:
        other_alive.down = True
        other_alive.answer.set()
        failing.watch()
        async with asyncio.timeout(FIRST_ANSWER_WAIT_S / 2):
            await failing.first_answer()
        assert failing.asked == 0 and failing.new.keeping
        silent.watch()
        started = loop.time()
        await silent.first_answer()
        assert FIRST_ANSWER_WAIT_S * 0.9 <= loop.time() - started < FIRST_ANSWER_WAIT_S * 2
        assert silent.asked == 0
        async with asyncio.timeout(0.1):  # waited once in vain: the claims after it do not wait again
            await silent.first_answer()
        async with asyncio.timeout(0.1):
            await KeepJudges(None, "instance-0", LEASE_S).first_answer()
    finally:
        await failing.close()
        await silent.close()


class ToldWhenAsked:
    """Who is alive (another instance), told once this loop's `answer` is set."""

    def __init__(self) -> None:
        self.answer: asyncio.Event | None = None

    async def live_holders(self, prefix: str) -> list[str]:
        assert self.answer is not None
        await self.answer.wait()
        return ["instance-1"]


def test_judges_closed_and_watching_again_on_another_loop_wait_there() -> None:
    """A tool's next run (a new event loop) with the same judges: the first answer is waited for on that loop."""
    told = ToldWhenAsked()
    judges = KeepJudges(told, "instance-0", LEASE_S)

    async def one_run() -> None:
        answer = told.answer = asyncio.Event()
        judges.watch()
        waiting = asyncio.create_task(judges.first_answer())
        await asyncio.sleep(0.05)
        assert not waiting.done()
        answer.set()
        async with asyncio.timeout(FIRST_ANSWER_WAIT_S / 2):
            await waiting
        assert not judges.new.keeping  # told: another instance is alive
        await judges.close()

    asyncio.run(one_run())
    asyncio.run(one_run())


async def test_among_others_the_probes_that_come_back_make_an_instance_keep_its_new_sessions_again(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    async with two_instances(tmp_path, fake_llm, postgres_dsn, "instance-0", "instance-1") as (a, _, _):
        leases = await started_among_others(a)
        probes = 0
        for n in range(PROBE_EVERY * 4):
            chat = f"sticky-{n}"
            await answered(a, chat, "m1")
            if leases.holds(key_of(chat)):  # a probe: kept all the same
                probes += 1
                await answered(a, chat, "m2")  # it came back
            if leases.keeps_new_sessions:
                break
        assert probes == 3  # from "moves on" to "comes back": three verdicts of a quarter each
        await answered(a, "kept", "m1")
        assert leases.holds(key_of("kept"))


async def test_an_instance_alone_keeps_its_new_sessions(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    async with two_instances(tmp_path, fake_llm, postgres_dsn, "instance-0") as (a, _, _):  # the other is not alive
        leases = a.gateway.session_leases
        await answered(a, "first", "m1")
        await until(lambda: leases.peers_asked > 0)
        await answered(a, "next", "m1")
        assert leases.keeps_new_sessions and leases.holds(key_of("next"))


async def test_the_lease_a_crashed_predecessor_left_makes_an_instance_doubt_only_until_it_expires(
    tmp_path: Path, fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """A restarted process (a new holder) sees its predecessor's `instance:` lease alive until it expires; a probe
    judged meanwhile does not keep it letting its sessions go once it is alone."""
    async with two_instances(
        tmp_path, fake_llm, postgres_dsn, "instance-0", "crashed-before", lease_s=SHORT_LEASE_S
    ) as (a, _, alive):
        leases = await started_among_others(a)
        for n in range(PROBE_EVERY):
            await answered(a, f"probe-{n}", "m1")
            if leases.holds(key_of(f"probe-{n}")):
                await answered(a, f"probe-{n}", "m2")  # a verdict: it came back
                break
        assert not leases.keeps_new_sessions  # one verdict of a quarter
        asked = leases.peers_asked
        await alive.gone("crashed-before")
        await until(lambda: leases.peers_asked > asked)
        await answered(a, "next", "m1")
        assert leases.keeps_new_sessions and leases.holds(key_of("next"))


def test_what_a_judge_expects_before_its_first_verdict_gives_way_to_its_verdicts() -> None:
    judge = KeepJudge()
    judge.expect(others_alive=True)
    assert not judge.keeping
    judge.expect(others_alive=False)
    assert judge.keeping  # the others went: nothing else can take them
    key = key_of("judged")
    judge.kept(key)
    judge.judge(key, stayed=True)
    judge.expect(others_alive=True)
    assert judge.keeping  # a verdict counts, not the expectation
    for _ in range(3):  # 1 -> 0.75 -> 0.56 -> 0.42
        judge.kept(key)
        judge.judge(key, stayed=False)
    assert not judge.keeping
    judge.expect(others_alive=False)
    assert judge.keeping  # alone: whatever moved before, nothing else can take them now
