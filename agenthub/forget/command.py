"""`/forget`: the sender's own messages in this chat and their profile, double-confirmed like `/restart`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from agenthub.clock import Clock
from agenthub.forget.redact import Person
from agenthub.forget.service import Forgetter, JobsHook
from agenthub.gateway.commands import CommandContext, CommandTier, ConfirmWindow, SessionControl
from agenthub.session_keys import SessionKey

if TYPE_CHECKING:
    from agenthub.scheduler.core import Scheduler


@asynccontextmanager
async def held(control: SessionControl, key: SessionKey) -> AsyncIterator[None]:
    """The session's serialisation: its compaction in flight is aborted (it read the old messages), the running
    turn finishes and stores its reply, and the next queued turn waits until the block exits."""
    await control.cancel_background(key)
    async with control.hold(key):
        await control.cancel_background(key)  # one the running turn's after-turn hook started meanwhile
        yield


def jobs_hook(scheduler: Scheduler) -> JobsHook:
    """Forget drops the jobs the person created, through the scheduler that holds them."""

    async def drop(agent: str, person: Person, key: SessionKey | None) -> int:
        return await scheduler.delete_created_by(agent, person.channel, person.sender_id, key)

    return drop


class ForgetCommand:
    """The first `/forget` asks; a second one from the same sender in the same chat within the window acts."""

    name, help_key, tier = "forget", "forget.help", CommandTier.PRIORITY

    def __init__(
        self, control: SessionControl, clock: Clock, window_s: float, forgetter: Callable[[], Forgetter]
    ) -> None:
        self.control, self.clock = control, clock
        self.forgetter = forgetter  # built by the composition root over the daemon's history, memory and jobs
        self.confirmations = ConfirmWindow(window_s)

    async def __call__(self, ctx: CommandContext) -> str:
        sender = ctx.message.sender_id
        if not sender:  # nobody to forget (and nobody who could confirm)
            return ctx.text("forget.no_sender")
        if not self.confirmations.confirm((ctx.key, sender), self.clock()):
            return ctx.text("forget.confirm", seconds=int(self.confirmations.window_s))
        self.control.drop_queued(ctx.key, sender)  # not stored yet; they must not be stored after the redaction
        forgetter = self.forgetter()
        report = await forgetter.forget_in_chat(ctx.agent, ctx.key, Person(ctx.message.channel, sender))
        return ctx.text("forget.done", messages=report.messages, replies=report.replies)
