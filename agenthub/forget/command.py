"""`/forget`: the sender's own messages in this chat and their profile, double-confirmed like `/restart`."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from agenthub.forget.redact import Person
from agenthub.forget.service import Forgetter, JobsHook, no_memory_writers
from agenthub.forget.usage import usage_hook
from agenthub.gateway.commands import CommandContext, CommandTier, ConfirmWindow
from agenthub.storage.keys import SessionKey

if TYPE_CHECKING:
    from agenthub.gateway.core import GatewayCore
    from agenthub.scheduler.core import Scheduler


@asynccontextmanager
async def held(gateway: GatewayCore, key: SessionKey) -> AsyncIterator[None]:
    """The session's serialisation: its compaction in flight is aborted (it read the old messages), the running
    turn finishes and stores its reply, and the next queued turn waits until the block exits."""
    await gateway.cancel_background(key)
    async with gateway.hold(key):
        await gateway.cancel_background(key)  # one the running turn's after-turn hook started meanwhile
        yield


def gateway_forgetter(gateway: GatewayCore) -> Forgetter:
    """A Forgetter on the daemon's own history cache and memory writers, each session redacted while held, no
    memory rewrite from material read before it ended written (L3 runs, flushes)."""
    layer = gateway.memory_layer
    return Forgetter(
        gateway.settings,
        gateway.history,
        gateway.memory_files,
        guard=functools.partial(held, gateway),
        index=gateway.search.purge,  # the live index re-reads the redacted files (its file stays open)
        exclusive=layer.processor.forgetting if layer is not None else no_memory_writers,
        jobs=None if gateway.scheduler is None else jobs_hook(gateway.scheduler),
        settled=None if gateway.inbox is None else gateway.inbox.drop_settled,
        usage=None if gateway.usage is None else usage_hook(gateway.usage.store, gateway.usage.recorder),
    )


def jobs_hook(scheduler: Scheduler) -> JobsHook:
    """Forget drops the jobs the person created, through the scheduler that holds them."""

    async def drop(agent: str, person: Person, key: SessionKey | None) -> int:
        return await scheduler.delete_created_by(agent, person.channel, person.sender_id, key)

    return drop


class ForgetCommand:
    """The first `/forget` asks; a second one from the same sender in the same chat within the window acts."""

    name, help_key, tier = "forget", "forget.help", CommandTier.PRIORITY

    def __init__(self, gateway: GatewayCore) -> None:
        self.gateway = gateway  # the forgetter reads the memory layer and scheduler attached after start-up
        self.confirmations = ConfirmWindow(gateway.settings.session.restart_confirm_s)

    async def __call__(self, ctx: CommandContext) -> str:
        gw, sender = self.gateway, ctx.message.sender_id
        if not sender:  # nobody to forget (and nobody who could confirm)
            return ctx.text("forget.no_sender")
        if not self.confirmations.confirm((ctx.key, sender), gw.clock()):
            return ctx.text("forget.confirm", seconds=int(self.confirmations.window_s))
        gw.drop_queued(ctx.key, sender)  # not stored yet; they must not be stored after the redaction
        report = await gateway_forgetter(gw).forget_in_chat(ctx.agent, ctx.key, Person(ctx.message.channel, sender))
        return ctx.text("forget.done", messages=report.messages, replies=report.replies)
