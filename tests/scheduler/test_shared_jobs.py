"""Jobs in the shared store (postgres): every instance sees every job, the `scheduler` lease holder runs it, and
each due time runs exactly once across instances, also when leadership moves or two believe they lead."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest_asyncio

from agenthub.agent.tools import ToolContext, run_tool
from agenthub.clock import ManualClock
from agenthub.config import SchedulerSettings, Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_services, open_stores
from agenthub.messages import InboundMessage
from agenthub.scheduler.core import Scheduler
from agenthub.scheduler.jobs import Job, JobError
from agenthub.scheduler.tool import cron_jobs_tool
from agenthub.scheduler.wiring import SCHEDULER_LEASE
from agenthub.session_keys import session_key
from agenthub.storage.postgres import Database, PostgresJobs, PostgresLeases, open_database
from agenthub.storage.singleton import InstanceLeases, Singleton
from tests.support.fakes.anthropic import FakeAnthropic, reply_text, reply_tool
from tests.support.leases import InstanceView
from tests.support.postgres import PostgresServer, migrated
from tests.support.scheduler import START, until

LEASE_S = 1.0
MINUTE = 60.0


@dataclass
class Instance:
    """One daemon's scheduler: its own pool, its own holder id, its link to the one lease table."""

    name: str
    scheduler: Scheduler
    database: Database
    view: InstanceView
    lease: Singleton | None = None
    fired: list[tuple[str, str, float]] = field(default_factory=list)


@dataclass
class Deployment:
    clock: ManualClock
    instances: list[Instance]
    runs: list[tuple[str, str, float]]
    """(instance, job id, due) of every run, whichever instance ran it."""

    async def open_leases(self) -> None:
        for instance in self.instances:  # the first one opened takes the free lease
            await self._open(instance)

    async def _open(self, instance: Instance) -> None:
        async def fire(job: Job, due: float) -> None:
            self.runs.append((instance.name, job.id, due))

        async def start() -> None:
            await instance.scheduler.start(fire)

        leases = InstanceLeases(store=instance.view, holder=instance.name, ttl_s=LEASE_S)
        instance.lease = leases.singleton(SCHEDULER_LEASE, start=start, stop=instance.scheduler.pause)
        await instance.lease.open()

    def leader(self) -> Instance | None:
        leading = [i for i in self.instances if i.lease is not None and i.lease.running]
        assert len(leading) <= 1, [i.name for i in leading]
        return leading[0] if leading else None


@pytest_asyncio.fixture
async def deployment(postgres_dsn: str) -> AsyncIterator[Deployment]:
    dsn = migrated(postgres_dsn)
    clock = ManualClock(START)
    shared_leases = PostgresLeases(Database(dsn))
    instances = []
    for n in range(3):
        database = Database(dsn)
        scheduler = Scheduler(SchedulerSettings(), PostgresJobs(database), clock=clock, refresh_s=0.05)
        instances.append(Instance(f"instance-{n}", scheduler, database, InstanceView(shared_leases)))
    yield Deployment(clock, instances, [])
    for instance in instances:
        instance.view.down = False
        if instance.lease is not None:
            await instance.lease.close()
        await instance.scheduler.stop()
        await instance.database.close()
    await shared_leases.database.close()


def _job(job_id: str, *, cron: str | None = None, at: float | None = None) -> Job:
    due = at if at is not None else START + MINUTE
    return Job(
        id=job_id,
        agent="default",
        channel="wecom",
        chat_id="group-1",
        timezone="Asia/Shanghai",
        created_at=START,
        cron=cron,
        at=at,
        text="交周报",
        next_due=due,
    )


async def _kill(instance: Instance) -> None:
    """Like kill -9: nothing of it reaches the store any more (no renewal, no release, no job write)."""
    instance.view.down = True
    await instance.database.close()
    await instance.scheduler.pause()


async def test_a_job_created_on_a_standby_fires_once_on_the_leader(deployment: Deployment) -> None:
    await deployment.open_leases()
    leader, standby = deployment.instances[0], deployment.instances[2]
    assert deployment.leader() is leader
    await standby.scheduler.add(_job("once", at=START + MINUTE))
    await until(lambda: leader.scheduler.get("default", "once") is not None)
    deployment.clock.advance(MINUTE + 1)
    await until(lambda: len(deployment.runs) >= 1)
    await asyncio.sleep(0.3)  # refreshes of every instance go round: nobody runs it again
    assert deployment.runs == [("instance-0", "once", START + MINUTE)]
    assert await standby.scheduler.store.load_all() == []  # the one-off is done for every instance
    await standby.scheduler.sync("default")
    assert standby.scheduler.for_agent("default") == []


async def test_ten_fires_run_once_each_while_the_leader_is_killed_midway(deployment: Deployment) -> None:
    await deployment.open_leases()
    first = deployment.leader()
    assert first is deployment.instances[0]
    await deployment.instances[1].scheduler.add(_job("minutely", cron="* * * * *"))
    await until(lambda: first.scheduler.get("default", "minutely") is not None)
    dues = [START + MINUTE * k for k in range(1, 11)]
    for k, due in enumerate(dues):
        if k == 5:
            await _kill(first)
            await until(lambda: (leader := deployment.leader()) is not None and leader is not first, timeout=10)
        deployment.clock.advance(due - deployment.clock())
        await until(lambda k=k: len(deployment.runs) >= k + 1)  # type: ignore[misc]
    await asyncio.sleep(0.3)
    assert [(job, due) for _, job, due in deployment.runs] == [("minutely", due) for due in dues]
    assert {name for name, _, _ in deployment.runs[:5]} == {"instance-0"}
    second = deployment.leader()
    assert second is not None and {name for name, _, _ in deployment.runs[5:]} == {second.name}


async def test_instances_that_all_believe_they_lead_run_each_fire_once(deployment: Deployment) -> None:
    """Leadership moving between a fire and its record, at its worst: every instance runs its loop at once (a
    stale leader that has not noticed yet); the record in the store lets exactly one run each due time."""
    for instance in deployment.instances:

        async def fire(job: Job, due: float, name: str = instance.name) -> None:
            deployment.runs.append((name, job.id, due))

        await instance.scheduler.start(fire)
    await deployment.instances[2].scheduler.add(_job("minutely", cron="* * * * *"))
    await deployment.instances[1].scheduler.add(_job("once", at=START + 3 * MINUTE))
    for instance in deployment.instances:
        await until(lambda s=instance.scheduler: len(s) == 2)  # type: ignore[misc]
    for k in range(1, 11):
        deployment.clock.advance(MINUTE)
        await until(lambda k=k: len({(j, d) for _, j, d in deployment.runs}) >= k + (k >= 3))  # type: ignore[misc]
    await asyncio.sleep(0.3)
    runs = sorted((job, due) for _, job, due in deployment.runs)
    expected = sorted([("minutely", START + MINUTE * k) for k in range(1, 11)] + [("once", START + 3 * MINUTE)])
    assert runs == expected


async def test_every_instance_lists_and_changes_the_jobs_another_made(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic, postgres_dsn: str
) -> None:
    """Two `serve` instances on one database (the composition root's stores): a job the model creates on one
    is listed, updated and deleted through the tool and `/jobs` on the other."""
    settings = settings_factory(store={"backend": "postgres", "dsn": migrated(postgres_dsn)})
    stores = [await open_stores(settings), await open_stores(settings)]
    try:
        async with (
            build_services(settings, stores=stores[0]) as first,
            build_services(settings, stores=stores[1]) as b_,
        ):
            a, b = first.gateway, b_.gateway
            created = await _tool_turn(b, fake_llm, {"action": "create", "at": "2099-12-02T09:00:00", "text": "交周报"})
            job_id = created.split()[2].rstrip(";")
            assert job_id in await _tool_turn(a, fake_llm, {"action": "list"})
            await _tool_turn(a, fake_llm, {"action": "update", "job_id": job_id, "text": "交月报"})
            assert "交月报" in await (await b.submit(InboundMessage("cli", "direct", "me", "/jobs"))).text()
            reply = await (await b.submit(InboundMessage("cli", "direct", "me", f"/jobs delete {job_id}"))).text()
            assert job_id in reply
            scheduler = first.scheduler
            assert scheduler is not None and await scheduler.delete("default", job_id) is None  # the admin route
            assert "no scheduled jobs" in await _tool_turn(a, fake_llm, {"action": "list"})
    finally:
        for store in stores:
            await store.aclose()


async def _tool_turn(gw: GatewayCore, fake: FakeAnthropic, args: dict[str, Any]) -> str:
    """One turn in which the model calls manage_cron_jobs with `args`; the tool's result text."""
    fake.script(reply_tool("manage_cron_jobs", args), reply_text("好的"))
    await (await gw.submit(InboundMessage("cli", "direct", "me", "jobs please"))).text()
    request = fake.message_requests()[-1]
    assert request.body is not None
    results = [b for m in request.body["messages"] if isinstance(m["content"], list) for b in m["content"]]
    result = [b for b in results if b.get("type") == "tool_result"][-1]
    assert not result.get("is_error"), result
    return str(result["content"])


async def test_the_tool_answers_a_clear_error_while_the_job_store_is_away(
    gateway: GatewayCore, own_postgres_server: PostgresServer
) -> None:
    database = await open_database(own_postgres_server.dsn(), checkout_timeout_s=1.0)
    try:
        scheduler = Scheduler(SchedulerSettings(), PostgresJobs(database))
        agent = gateway.agents.get("default")
        workspace = gateway.settings.workspace_dir / agent.name
        ctx = ToolContext(agent, session_key("default", "cli", "direct"), "me", gateway.memory_files, workspace)
        own_postgres_server.stop()
        for args in ({"action": "list"}, {"action": "create", "at": "2099-12-02T09:00:00", "text": "交周报"}):
            text, is_error = await run_tool([cron_jobs_tool(scheduler)], "manage_cron_jobs", args, ctx)
            assert is_error and text == "the jobs could not be read or saved (storage error); nothing was changed"
    finally:
        await database.close()


async def test_an_edit_that_races_a_fire_never_runs_the_same_due_time_twice(deployment: Deployment) -> None:
    """B reads the job (due D); the leader records and runs D (the job advances to D'); B's edit, made from what it
    read, must not put D back: that would be past due again on the leader's next refresh and run a second time."""
    await deployment.open_leases()
    leader, editor = deployment.instances[0], deployment.instances[1]
    assert deployment.leader() is leader
    await editor.scheduler.add(_job("minutely", cron="* * * * *"))
    await until(lambda: leader.scheduler.get("default", "minutely") is not None)
    await editor.scheduler.sync("default")
    read = editor.scheduler.get("default", "minutely")
    assert read is not None and read.next_due == START + MINUTE
    edited = dataclasses.replace(read, text="交月报")  # built from what it read, as the tool and /jobs build it
    deployment.clock.advance(MINUTE + 1)
    await until(lambda: len(deployment.runs) >= 1)
    refused: JobError | None = None
    try:  # the leader recorded D (and advanced the job to D') before it ran it
        await editor.scheduler.update(edited)
    except JobError as e:
        refused = e

    await asyncio.sleep(0.3)  # refreshes of every instance go round: nobody runs D again
    assert deployment.runs == [("instance-0", "minutely", START + MINUTE)]
    assert refused is not None  # the edit was made from a job that has run since: the caller reads it again
    again = editor.scheduler.get("default", "minutely")  # reloaded by the refused edit
    assert again is not None and again.next_due == START + 2 * MINUTE
    await editor.scheduler.update(dataclasses.replace(again, text="交月报"))
    [stored] = await editor.scheduler.store.load_all("default")
    assert stored.next_due == START + 2 * MINUTE and "交月报" in stored.text
