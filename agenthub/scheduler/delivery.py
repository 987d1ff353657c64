"""Running a due job: a fixed text is stored in the chat's history, a prompt runs a real turn; then `Channel.send`."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Protocol

import structlog

from agenthub import i18n
from agenthub.channel import Channel
from agenthub.errors import ChannelSendError
from agenthub.messages import USER_ABORTS, ErrorCode, ErrorEvent, InboundMessage, OutboundMessage
from agenthub.scheduler.jobs import Job
from agenthub.scheduler.texts import prompt_failed_notice
from agenthub.session_keys import SessionKey

if TYPE_CHECKING:
    from agenthub.agent.definition import AgentRegistry
    from agenthub.clock import Clock
    from agenthub.config import Settings
    from agenthub.gateway.handle import ReplyHandle
    from agenthub.scheduler.core import Scheduler
    from agenthub.session.history import SessionHistory

log = structlog.get_logger(__name__)

QUIET_ENDS = USER_ABORTS | {"shutdown"}
"""A prompt job's turn ended this way (its creator stopped it, the chat restarted, the daemon stops) gets no notice."""

SCHEDULER_SENDER = "scheduler:"
"""Prefix of the `sender_id` of a prompt job's turn when the job names no creator: `scheduler:<job id>`."""


class DeliveryHost(Protocol):
    """What a delivery uses of the gateway (which provides it): submit a turn, or store a text while holding the
    session."""

    settings: Settings
    agents: AgentRegistry
    history: SessionHistory
    clock: Clock

    async def submit(self, message: InboundMessage) -> ReplyHandle: ...

    def hold(self, key: SessionKey) -> AbstractAsyncContextManager[None]: ...


class JobDelivery:
    """The scheduler's `fire`: produce the job's message in the chat's session, then push it through its channel."""

    def __init__(self, gateway: DeliveryHost, scheduler: Scheduler | None, channels: Mapping[str, Channel]) -> None:
        self.gateway = gateway
        self.scheduler = scheduler
        self.channels = channels

    async def __call__(self, job: Job, due: float) -> None:
        text = await (self._run_prompt(job, due) if job.prompt is not None else self._store(job, job.text or ""))
        if text:
            await self._send(job, text)

    async def _store(self, job: Job, text: str) -> str:
        """A reminder (or a notice) goes into the history as an assistant message, after any turn running there."""
        async with self.gateway.hold(job.key):
            await self.gateway.history.append(job.key, {"role": "assistant", "content": text, "scheduled_job": job.id})
        return text

    async def _run_prompt(self, job: Job, due: float) -> str:  # "": nothing to send
        """A turn through the gateway's normal path, so it queues behind the chat's other turns. It runs on behalf
        of the job's creator in the chat as it was (their profile, that chat's memory); its stored user message
        carries `scheduled_job`. A failed turn is answered by a notice in the chat's locale (one
        stopped on purpose is not)."""
        metadata: dict[str, object] = {"scheduled_job": job.id, "due": due}
        if job.chat_type is not None:
            metadata["chat_type"] = job.chat_type
        message = InboundMessage(
            channel=job.channel,
            chat_id=job.chat_id,
            sender_id=job.created_by or SCHEDULER_SENDER + job.id,
            content=f"[scheduled job {job.id}] {job.prompt}",
            message_id=f"job-{job.id}-{int(due)}",
            agent=job.agent,
            cred_id=job.cred_id,
            metadata=metadata,
        )
        final = await (await self.gateway.submit(message)).result()
        if isinstance(final, ErrorEvent):
            log.warning("job_turn_failed", agent=job.agent, job_id=job.id, code=final.code)
            if final.code in QUIET_ENDS:
                return ""
            if final.code == ErrorCode.BUDGET_EXCEEDED:  # refused before any model call: say which limit, and when
                return await self._store(job, final.message)
            return await self._store(job, self._failure_notice(job))
        return final.full_text

    def _failure_notice(self, job: Job) -> str:
        gw = self.gateway
        agent = gw.agents.agents.get(job.agent)
        locale = i18n.locale_for(gw.settings, job.channel, agent)
        current = self.scheduler.get(job.agent, job.id) if self.scheduler is not None else None
        following = current.next_due if current is not None else None  # as recorded (moved or deleted meanwhile)
        default_zone = gw.settings.scheduler.timezone
        return prompt_failed_notice(job, following, locale, default_zone=default_zone, now=gw.clock())

    async def _send(self, job: Job, text: str) -> None:
        channel = self.channels.get(job.channel)
        if channel is None:
            log.warning("job_channel_unavailable", agent=job.agent, job_id=job.id, channel=job.channel)
            return
        outbound = OutboundMessage(job.channel, job.chat_id, text, cred_id=job.cred_id, agent=job.agent)
        try:
            await channel.send(outbound)
        except ChannelSendError as e:
            log.error("job_send_failed", agent=job.agent, job_id=job.id, channel=job.channel, error=str(e))
