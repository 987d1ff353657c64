"""Plugging the scheduler into the gateway: the `/jobs` command at build time, delivery once channels run."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from agenthub.channel import Channel
from agenthub.gateway.commands import CommandContext
from agenthub.scheduler.core import Scheduler
from agenthub.scheduler.delivery import JobDelivery
from agenthub.scheduler.store import JobStore
from agenthub.scheduler.texts import jobs_listing
from agenthub.storage.jobs import JobDocuments

if TYPE_CHECKING:
    from agenthub.gateway.core import GatewayCore


def attach_scheduler(gateway: GatewayCore, store: JobDocuments | None = None) -> Scheduler | None:
    """Give the gateway its scheduler over `store` (default: the data directory's files; jobs load lazily) and
    the `/jobs` command; nothing runs until started."""
    settings = gateway.settings
    if not settings.scheduler.enabled:
        return None
    if store is None:
        store = JobStore(settings.data_dir, durable=settings.session.fsync)
    scheduler = gateway.scheduler = Scheduler(settings.scheduler, store, clock=gateway.clock)
    gateway.commands.register("jobs", "jobs.help", _jobs_command)
    return scheduler


SCHEDULER_LEASE = "scheduler"
"""Due jobs fire on one instance of the deployment at a time: the holder of this lease."""


async def start_scheduler(gateway: GatewayCore, channels: Iterable[Channel]) -> None:
    """Fire due jobs through the running channels while this instance holds the `scheduler` lease (the
    composition root calls this after the channels start)."""
    scheduler = gateway.scheduler
    if scheduler is None or gateway.scheduler_lease is not None:
        return
    delivery = JobDelivery(gateway, {c.name: c for c in channels})
    scheduler.serving = True  # jobs fire on whichever instance leads, so a change made here is not idle

    async def start() -> None:
        await scheduler.start(delivery)

    gateway.scheduler_lease = gateway.leases.singleton(SCHEDULER_LEASE, start=start, stop=scheduler.pause)
    await gateway.scheduler_lease.open()


async def pause_scheduler(gateway: GatewayCore) -> None:
    """No new runs (shutdown begins), and the lease goes to a standby; deliveries already under way go on."""
    lease, gateway.scheduler_lease = gateway.scheduler_lease, None
    if lease is not None:
        await lease.close()
    if gateway.scheduler is not None:
        await gateway.scheduler.pause()


async def stop_scheduler(gateway: GatewayCore, grace_s: float = 0.0) -> None:
    """Pause, then give deliveries under way `grace_s` to reach their channel before they are cancelled."""
    if gateway.scheduler is not None:
        await gateway.scheduler.stop(grace_s)


async def _jobs_command(ctx: CommandContext) -> str:
    """`/jobs` lists the chat's jobs, `/jobs delete ID` removes one; answered in the chat's locale."""
    gw = ctx.gateway
    scheduler = gw.scheduler
    if scheduler is None:
        return ctx.text("jobs.disabled")
    await scheduler.sync(ctx.key.agent)
    words = ctx.args.split()
    if not words:
        jobs = scheduler.for_chat(ctx.key)
        return jobs_listing(jobs, ctx.locale, default_zone=gw.settings.scheduler.timezone, now=gw.clock())
    if len(words) == 2 and words[0].lower() == "delete":
        job = await scheduler.delete(ctx.key.agent, words[1], ctx.key)
        return ctx.text("jobs.deleted" if job is not None else "jobs.not_found", job_id=words[1])
    return ctx.text("jobs.usage")
