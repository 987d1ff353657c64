"""Messages through the durable inbox: accepted, submitted with their entry's id, settled once answered; the
resume of what a crash left unsettled (the core's own HTTP entries; every other source by its channel); and this
instance's liveness, by which a survivor takes over what a stopped instance had accepted."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from agenthub.channel import Channel, ResumableChannel, SessionResolver, Submitter
from agenthub.clock import sleep_until
from agenthub.errors import StorageError
from agenthub.gateway.handle import ReplyHandle
from agenthub.gateway.inbox_replay import (
    INBOX_ANSWERED_BY_STORING,
    INBOX_ID,
    INBOX_JUST_ACCEPTED,
    INBOX_SEQ,
    INBOX_SESSION,
)
from agenthub.messages import DoneEvent, ErrorCode, ErrorEvent, InboundMessage
from agenthub.storage.inbox import InboxEntry, message_from_json, message_to_json
from agenthub.storage.lease import LeaseKeeper, instance_lease
from agenthub.storage.ports import Inbox
from agenthub.storage.singleton import InstanceLeases

log = structlog.get_logger(__name__)

HTTP_SOURCE = "http"
"""The source of the HTTP API's chat requests; the core resumes them itself."""

UNANSWERED_CODES = frozenset({ErrorCode.SHUTDOWN, ErrorCode.ABORTED})
"""A reply ending with one of these was cut by the shutdown (or never ran): its entry is answered after the restart."""
GIVEN_UP_CODES = frozenset({ErrorCode.LEASE_LOST})
"""A reply ending with one of these was cut because another instance may run its session now (or answers the
entry already): its entry is given up (`Inbox.release`), never settled here; a takeover pass answers it."""


class Settlement(enum.Enum):
    """What becomes of an inbox entry once its reply has ended: one rule for the HTTP API (`InboxSubmitter`) and
    the push channels (`channels/toolkit/inbox.InboxGate`)."""

    SETTLE = "settle"
    """Answered (an answer, an error the user was shown, `/stop`, `/restart`): never answered again."""
    LEAVE = "leave"
    """Cut by the shutdown, or aborted before it ran to an answer (`UNANSWERED_CODES`): left unsettled, answered
    after the restart (files) or by a survivor (PostgreSQL)."""
    RELEASE = "release"
    """Cut because another instance may run its session now (`GIVEN_UP_CODES`): given up, a takeover answers it."""


CLOSE_GRACE_S = 5.0

AnswerHook = Callable[[InboundMessage, DoneEvent | ErrorEvent], Awaitable[None]]
"""Told each message's final reply once it is answered for good (not cut for a restart or another instance)."""


def settlement(final: DoneEvent | ErrorEvent) -> Settlement:
    """The settlement of an entry whose reply ended with `final`."""
    if isinstance(final, ErrorEvent) and final.code in GIVEN_UP_CODES:
        return Settlement.RELEASE
    if isinstance(final, ErrorEvent) and final.code in UNANSWERED_CODES:
        return Settlement.LEAVE
    return Settlement.SETTLE


def with_inbox_id(
    message: InboundMessage, entry: InboxEntry, *, just_accepted: bool = False, answered_by_storing: bool = False
) -> InboundMessage:
    """`message` carrying its entry's id (the turn stores it with the user record: exactly once on resume), its
    sequence (the session's arrival order), when it was accepted with one its session, whether this is the
    first submission of an entry accepted a moment ago here (`INBOX_JUST_ACCEPTED`: its turn looks nothing up),
    and whether storing its answer answers it (`INBOX_ANSWERED_BY_STORING`: the answer's append settles it)."""
    extra: dict[str, Any] = {INBOX_ID: entry.id, INBOX_SEQ: entry.seq, INBOX_JUST_ACCEPTED: just_accepted}
    if answered_by_storing:
        extra[INBOX_ANSWERED_BY_STORING] = True
    if entry.session is not None:
        extra[INBOX_SESSION] = entry.session
    return dataclasses.replace(message, metadata={**message.metadata, **extra})


class InboxSubmitter:
    """Submits messages through the inbox: `submit` returns once the message is stored (StorageError when it could
    not be: nothing was submitted), and the entry is settled when the reply has ended with its answer. With
    `resolve`, each entry is stored with its session (its place in the session's arrival order at once); with
    `answered`, that hook hears each final reply before its entry is settled (the idempotency keys); with
    `answered_by_storing`, the messages it says yes to are answered once their answer is stored, and the append
    that stores it settles their entries where the store can (their own settle then sends nothing)."""

    def __init__(
        self,
        inbox: Inbox,
        gateway: Submitter,
        *,
        resolve: SessionResolver | None = None,
        answered: AnswerHook | None = None,
        answered_by_storing: Callable[[InboundMessage], bool] | None = None,
    ) -> None:
        self.inbox = inbox
        self.gateway = gateway
        self._resolve = resolve
        self._answered = answered
        self._answered_by_storing = answered_by_storing
        self._settling: set[asyncio.Task[None]] = set()

    async def submit(self, source: str, message: InboundMessage, payload: dict[str, Any] | None = None) -> ReplyHandle:
        session = self._resolve(message.route) if self._resolve is not None else None
        payload = message_to_json(message) if payload is None else payload
        entry = await self.inbox.accept(source, payload, session=session)
        return await self.submit_entry(entry, message, just_accepted=True)

    async def submit_entry(
        self, entry: InboxEntry, message: InboundMessage, *, just_accepted: bool = False
    ) -> ReplyHandle:
        by_storing = self._answered_by_storing is not None and self._answered_by_storing(message)
        submitted = with_inbox_id(message, entry, just_accepted=just_accepted, answered_by_storing=by_storing)
        handle = await self.gateway.submit(submitted)
        self.settle_when_answered(entry.id, handle, message)
        return handle

    def settle_when_answered(self, entry_id: str, handle: ReplyHandle, message: InboundMessage | None = None) -> None:
        settle = self._settle_after(entry_id, handle, message)
        task = asyncio.create_task(settle, name=f"inbox-settle:{entry_id}")
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def _settle_after(self, entry_id: str, handle: ReplyHandle, message: InboundMessage | None) -> None:
        final = await handle.result()
        outcome = settlement(final)
        if outcome is Settlement.RELEASE:
            await release_quietly(self.inbox, entry_id)
            return
        if outcome is Settlement.LEAVE:
            log.info("inbox_entry_left_for_restart", entry_id=entry_id)
            return
        if self._answered is not None and message is not None:
            await self._answered(message, final)
        await settle_quietly(self.inbox, entry_id)

    async def aclose(self) -> None:
        """Wait (bounded) for the settles of replies that have ended; a reply still open stays unsettled."""
        if not self._settling:
            return
        _, late = await asyncio.wait(set(self._settling), timeout=CLOSE_GRACE_S)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late)


async def settle_quietly(inbox: Inbox, entry_id: str) -> None:
    """Settle `entry_id`; a failure is logged (the inbox retries it until the store takes it), never raised to
    the user."""
    try:
        await inbox.settle(entry_id)
    except StorageError as e:
        log.warning("inbox_settle_failed", entry_id=entry_id, error=str(e))


async def release_quietly(inbox: Inbox, entry_id: str) -> None:
    """Give `entry_id` up (`Inbox.release`); a failure is logged: the entry then stays this instance's, answered
    after its restart or by a survivor once its `instance:` lease is gone."""
    try:
        await inbox.release(entry_id)
    except StorageError as e:
        log.warning("inbox_release_failed", entry_id=entry_id, error=str(e))
    else:
        log.info("inbox_entry_given_up", entry_id=entry_id)


def source_owner(source: str) -> str:
    """The channel name a source belongs to (`wecom:bot:b1` → `wecom`)."""
    return source.split(":", 1)[0]


async def resume_http(submitter: InboxSubmitter, entries: Sequence[InboxEntry]) -> int:
    """Submit the unsettled HTTP entries again in acceptance order (their answers land in the sessions); an entry
    that is not a stored message is logged and settled. Returns how many were submitted."""
    submitted = 0
    for entry in sorted((e for e in entries if e.source == HTTP_SOURCE), key=lambda e: e.seq):
        try:
            message = message_from_json(entry.payload)
        except (ValueError, KeyError, TypeError):
            log.warning("inbox_entry_unreadable", entry_id=entry.id, source=entry.source)
            await settle_quietly(submitter.inbox, entry.id)
            continue
        await submitter.submit_entry(entry, message)
        submitted += 1
    if submitted:
        log.info("inbox_resumed", source=HTTP_SOURCE, count=submitted)
    return submitted


async def resume_channels(entries: Sequence[InboxEntry], channels: Sequence[Channel]) -> None:
    """Hand each channel its unsettled entries (in acceptance order) through `resume`; the entries of a source no
    running channel can resume stay unsettled, logged once per source as `inbox_unresumable`."""
    groups: dict[str, list[InboxEntry]] = {}
    for entry in sorted(entries, key=lambda e: e.seq):
        if entry.source != HTTP_SOURCE:
            groups.setdefault(source_owner(entry.source), []).append(entry)
    for channel in channels:
        mine = groups.get(channel.name)
        if mine and isinstance(channel, ResumableChannel):
            del groups[channel.name]
            await _resume_one(channel, mine)
    for left in groups.values():
        for source in sorted({e.source for e in left}):
            log.warning("inbox_unresumable", source=source, count=sum(e.source == source for e in left))


async def _resume_one(channel: ResumableChannel, entries: list[InboxEntry]) -> None:
    try:
        await channel.resume(entries)
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("inbox_resume_failed", channel=channel.name, count=len(entries))
    else:
        log.info("inbox_resumed", source=channel.name, count=len(entries))


async def resume_then_start(entries: Sequence[InboxEntry], channels: list[Channel]) -> None:
    """Hand the channels what the last run left (`resume_channels`), then start them: each resumed entry holds its
    chat's place before the channel receives anything, so a new message of that chat is answered after it. A
    channel that fails to start is logged, stopped (its routes then refuse what arrives, so the platform delivers
    it again; what it holds stays unsettled, for the next start or, once this instance is gone, a survivor) and
    removed from `channels`; the others go on."""
    await resume_channels(entries, channels)
    for channel in list(channels):
        try:
            await channel.start()
        except Exception as e:
            log.error("channel_failed_to_start", channel=channel.name, error=str(e), error_type=type(e).__name__)
            channels.remove(channel)
            await _stop_failed(channel)


async def _stop_failed(channel: Channel) -> None:
    """Stop a channel whose start raised, so it neither acknowledges nor holds what it cannot answer."""
    try:
        await channel.stop()
    except Exception as e:
        log.error("channel_failed_to_stop", channel=channel.name, error=str(e), error_type=type(e).__name__)


class InstanceInbox:
    """This instance's place in a shared inbox: its liveness lease `instance:<holder>` (taken by `open` before it
    accepts anything, renewed by a `LeaseKeeper`, released by `close` once nothing of it runs any more), and a
    pass every `ttl_s / 3` that writes the settles the store refused and takes over, in one claim, the entries
    of instances whose lease is gone, for the sources this one can answer now (HTTP always; a channel's when
    `can_resume` says so), resumed as a restart resumes them. The exactly-once guard of the turn makes an entry
    that was answered but not settled cost no model call."""

    def __init__(
        self, inbox: Inbox, leases: InstanceLeases, submitter: InboxSubmitter, channels: Sequence[Channel]
    ) -> None:
        self.inbox = inbox
        self.submitter = submitter
        self.channels = channels
        self.taken_over = 0
        """Entries claimed from stopped instances (for /metrics)."""
        self._leases = leases
        self._keeper = LeaseKeeper(
            leases.store,
            instance_lease(leases.holder),
            leases.holder,
            ttl_s=leases.ttl_s,
            clock=leases.clock,
            on_lost=self._lost,
            takeovers=leases.takeovers,
        )
        self._loop: asyncio.Task[None] | None = None
        self._closing = False
        inbox.accept_only_while(self._keeper)  # lapsed: its accepts would be orphans at once

    @property
    def alive(self) -> bool:
        """Whether this instance holds its liveness lease now (else it accepts nothing and takes nothing over)."""
        return self._keeper.held

    def _lost(self) -> None:
        if not self._closing:  # while it runs: the others may now take what it is answering
            log.error("instance_lease_lost", holder=self._leases.holder)

    async def open(self) -> None:
        """Take the liveness lease (a fresh holder's is free) and keep it."""
        await self._keeper.step()
        if not self._keeper.held:
            log.error("instance_lease_not_taken", holder=self._leases.holder)
        self._keeper.start()

    def start(self) -> None:
        """Run `take_over()` every `ttl_s / 3` from now on."""
        self._loop = asyncio.create_task(self._run(), name="inbox-takeover")

    async def take_over(self) -> int:
        """One pass: retry refused settles, claim and resume the orphans this instance can answer; how many."""
        await self._retry_settles()
        if not self._keeper.held:  # to the others this instance may look dead: it takes nothing of theirs
            return 0
        try:
            sources = sorted(s for s in await self.inbox.orphan_sources() if self._can_answer(s))
            entries = await self.inbox.claim_orphans(sources) if sources else []
        except StorageError as e:
            log.warning("inbox_takeover_failed", error=str(e))
            return 0
        if not entries:
            return 0
        self.taken_over += len(entries)
        log.info("inbox_taken_over", count=len(entries), sources=sorted({e.source for e in entries}))
        await resume_http(self.submitter, entries)
        await resume_channels(entries, self.channels)
        return len(entries)

    def metrics(self) -> list[str]:
        """The takeover counters in Prometheus text exposition."""
        return [
            "# HELP agenthub_inbox_takeovers_total Accepted messages taken over from stopped instances.",
            "# TYPE agenthub_inbox_takeovers_total counter",
            f"agenthub_inbox_takeovers_total {self.taken_over}",
            "# HELP agenthub_lease_takeovers_total Leases this instance gained after another holder had them.",
            "# TYPE agenthub_lease_takeovers_total counter",
            f"agenthub_lease_takeovers_total {self._leases.takeovers.count}",
        ]

    async def _retry_settles(self) -> None:
        try:
            await self.inbox.retry_settles()
        except StorageError:
            log.warning("inbox_settles_still_refused")

    def _can_answer(self, source: str) -> bool:
        if source == HTTP_SOURCE:
            return True
        owner = source_owner(source)
        return any(c.name == owner and isinstance(c, ResumableChannel) and c.can_resume(source) for c in self.channels)

    async def _run(self) -> None:
        clock, interval = self._leases.clock, self._leases.ttl_s / 3
        while True:
            await sleep_until(clock, clock() + interval)
            try:
                await self.take_over()
            except asyncio.CancelledError:
                raise
            except Exception:  # the loop must outlive one bad pass, or a dead instance's messages would wait
                log.exception("inbox_takeover_pass_failed")

    async def stop_taking_over(self) -> None:
        """No more passes (the shutdown has begun); the lease is still held: this instance still answers."""
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.cancel()
            await asyncio.wait([loop])

    async def close(self) -> None:
        """Release the lease: what this instance left unsettled is taken over by a survivor at its next pass."""
        self._closing = True
        await self.stop_taking_over()
        await self._keeper.stop()
