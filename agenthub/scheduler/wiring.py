"""Plugging the scheduler in: `/jobs` (registered by the composition root), delivery once channels run."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from agenthub.channel import Channel
from agenthub.clock import Clock
from agenthub.config import Settings
from agenthub.gateway.commands import CommandContext, CommandTier
from agenthub.scheduler.core import Scheduler
from agenthub.scheduler.delivery import DeliveryHost, JobDelivery
from agenthub.scheduler.store import JobStore
from agenthub.scheduler.texts import jobs_listing
from agenthub.storage.ports import JobDocuments

if TYPE_CHECKING:
    from agenthub.storage.singleton import InstanceLeases, Singleton


def build_scheduler(settings: Settings, clock: Clock, store: JobDocuments | None = None) -> Scheduler | None:
    """The scheduler over `store` (default: the data directory's files; jobs load lazily), None when `[scheduler]`
    is off; nothing runs until started."""
    if not settings.scheduler.enabled:
        return None
    if store is None:
        store = JobStore(settings.data_dir, durable=settings.session.fsync)
    return Scheduler(settings.scheduler, store, clock=clock)


SCHEDULER_LEASE = "scheduler"
"""Due jobs fire on one instance of the deployment at a time: the holder of this lease."""


class JobRunner:
    """Fires the scheduler's due jobs through the running channels while this instance holds the `scheduler`
    lease."""

    def __init__(self, scheduler: Scheduler, leases: InstanceLeases) -> None:
        self.scheduler, self.leases = scheduler, leases
        self._lease: Singleton | None = None

    async def start(self, host: DeliveryHost, channels: Iterable[Channel]) -> None:
        scheduler = self.scheduler
        if self._lease is not None:
            return
        delivery = JobDelivery(host, scheduler, {c.name: c for c in channels})
        scheduler.serving = True  # jobs fire on whichever instance leads, so a change made here is not idle

        async def start() -> None:
            await scheduler.start(delivery)

        self._lease = self.leases.singleton(SCHEDULER_LEASE, start=start, stop=scheduler.pause)
        await self._lease.open()

    async def pause(self) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            await lease.close()
        await self.scheduler.pause()


class Scheduled(Protocol):
    """What starting and stopping the scheduler needs of the composition root's services."""

    @property
    def gateway(self) -> DeliveryHost: ...

    @property
    def jobs(self) -> JobRunner | None: ...


async def start_scheduler(services: Scheduled, channels: Iterable[Channel]) -> None:
    """Fire due jobs through the running channels while this instance holds the `scheduler` lease (the
    composition root calls this after the channels start)."""
    if services.jobs is not None:
        await services.jobs.start(services.gateway, channels)


async def pause_scheduler(services: Scheduled) -> None:
    """No new runs (shutdown begins), and the lease goes to a standby; deliveries already under way go on."""
    if services.jobs is not None:
        await services.jobs.pause()


async def stop_scheduler(services: Scheduled, grace_s: float = 0.0) -> None:
    """Pause, then give deliveries under way `grace_s` to reach their channel before they are cancelled."""
    if services.jobs is not None:
        await services.jobs.scheduler.stop(grace_s)


class JobsCommand:
    """`/jobs` lists the chat's jobs, `/jobs delete ID` removes one; answered in the chat's locale."""

    name, help_key, tier = "jobs", "jobs.help", CommandTier.PRIORITY

    def __init__(self, scheduler: Scheduler, default_zone: str, clock: Clock) -> None:
        self.scheduler, self.default_zone, self.clock = scheduler, default_zone, clock

    async def __call__(self, ctx: CommandContext) -> str:
        scheduler = self.scheduler
        await scheduler.sync(ctx.key.agent)
        words = ctx.args.split()
        if not words:
            jobs = scheduler.for_chat(ctx.key)
            return jobs_listing(jobs, ctx.locale, default_zone=self.default_zone, now=self.clock())
        if len(words) == 2 and words[0].lower() == "delete":
            job = await scheduler.delete(ctx.key.agent, words[1], ctx.key)
            return ctx.text("jobs.deleted" if job is not None else "jobs.not_found", job_id=words[1])
        return ctx.text("jobs.usage")
