"""The durable inbox steps of a push channel: dedup, store, acknowledge, answer in per-chat order, settle."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import Any, TypeVar

import structlog

from agenthub.aio import run_to_end, succeeded
from agenthub.channel import SessionResolver, Submitter
from agenthub.channel.inbox_flow import Settlement, settlement
from agenthub.errors import StorageError
from agenthub.gateway.handle import ReplyHandle
from agenthub.messages import Route
from agenthub.storage.inbox import InboxEntry
from agenthub.storage.ports import Inbox
from channels.toolkit.dedup import MessageDedup
from channels.toolkit.order import KeyedLock
from channels.toolkit.tasks import TaskSet

log = structlog.get_logger(__name__)

_T = TypeVar("_T")

Outcome = ReplyHandle | str | None
"""What a channel's admit step gives: the submitted turn's handle, a one-off text to send, or nothing."""
Admit = Callable[[InboxEntry], Awaitable[Outcome]]
Finish = Callable[[InboxEntry, Outcome], Awaitable[None]]


class Intake(enum.Enum):
    """What `InboxGate.take` did with a received message; only REFUSED must not be acknowledged."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    REFUSED = "refused"


class InboxGate:
    """One credential's receive path over the durable inbox.

    `take()` runs before the platform is acknowledged: dedup, then `inbox.accept` (durable when it returns); the
    answer runs in a task that took the chat's slot before the first await, so a chat's messages are admitted in
    arrival order. `admit(entry)` (downloads, `submit`) runs inside the slot, `finish(entry, outcome)` (consuming
    the handle, sending) after it; then the entry is settled. An entry stays unsettled (answered after the
    restart) when the turn was cancelled or cut by the shutdown, or when it arrived during the drain: the user is
    told `deferred_text` instead.

    A gate built with `ready=False` admits nothing until `open()` (its channel has started): entries resumed
    before that take their chats' slots first, so a message that arrives during the start queues behind them."""

    def __init__(
        self,
        *,
        inbox: Inbox,
        source: str,
        dedup: MessageDedup,
        tasks: TaskSet,
        gateway: Submitter,
        admit: Admit,
        finish: Finish,
        deferred_text: str,
        order: KeyedLock | None = None,
        ready: bool = True,
        session_of: SessionResolver | None = None,
    ) -> None:
        """`order`: the per-chat slots, when several gates share them (else the gate's own); `ready=False`: closed
        until `open()`; `session_of`: names the session of each route taken (`ChannelContext.session_of`; None: the
        gateway names it at submit)."""
        self.source = source
        self._session_of = session_of
        self._inbox = inbox
        self._dedup = dedup
        self._tasks = tasks
        self._gateway = gateway
        self._admit = admit
        self._finish = finish
        self._deferred_text = deferred_text
        self._order = order if order is not None else KeyedLock()
        self._ready = asyncio.Event()
        if ready:
            self._ready.set()

    def open(self) -> None:
        """The channel can answer now: what waited in the chats' slots goes on, in order."""
        self._ready.set()

    async def take(self, key: str, route: Route, payload: dict[str, Any]) -> Intake:
        """Dedup `key` and store `payload` with the session `route` will run in (its place in that session's order
        across instances from now on); the answer is under way when this returns ACCEPTED, in the slot of the
        route's chat. `RuntimeError` (nothing done) once the channel stops: the platform should deliver the message
        again."""
        chat, session = route.chat_id, None if self._session_of is None else self._session_of(route)
        accepted: asyncio.Future[InboxEntry | None] = asyncio.get_running_loop().create_future()
        self._tasks.spawn(self._answer(chat, accepted), name=f"{self.source}-{key}")  # its slot: taken now
        store = asyncio.ensure_future(self._store(key, payload, session))
        try:
            intake, entry = await run_to_end(store)  # a dedup id and an entry once written are the answer's to keep
        except BaseException:
            accepted.set_result(store.result()[1] if succeeded(store) else None)
            raise
        accepted.set_result(entry)
        return intake

    async def _store(self, key: str, payload: dict[str, Any], session: str | None) -> tuple[Intake, InboxEntry | None]:
        if await self._dedup.is_duplicate(key):
            return Intake.DUPLICATE, None
        try:
            entry = await self._inbox.accept(self.source, payload, session=session)
        except StorageError:
            await self._dedup.forget(key)  # not stored: the platform's retry must get through, wherever it lands
            log.error("inbox_accept_failed", source=self.source, key=key)
            return Intake.REFUSED, None
        return Intake.ACCEPTED, entry

    def resume(self, entries: Iterable[InboxEntry], chat_of: Callable[[InboxEntry], str]) -> None:
        """Answer entries a stopped process accepted, as if they had just arrived (no dedup, no acknowledgement),
        each chat's in `seq` order, ahead of any message `take`n after this call (slots go in the order asked)."""
        for entry in sorted(entries, key=lambda e: e.seq):
            try:
                chat = chat_of(entry)
            except (ValueError, KeyError, TypeError):
                log.error("inbox_entry_unreadable", source=self.source, entry=entry.id)
                continue
            stored: asyncio.Future[InboxEntry | None] = asyncio.get_running_loop().create_future()
            stored.set_result(entry)
            log.info("inbox_entry_resumed", source=self.source, entry=entry.id, seq=entry.seq)
            self._tasks.spawn(self._answer(chat, stored), name=f"{self.source}-resume-{entry.seq}")

    async def _answer(self, chat: str, accepted: asyncio.Future[InboxEntry | None]) -> None:
        async with self._order.hold(chat):
            entry = await accepted
            if entry is None:
                return
            await self._ready.wait()
            deferred = not self._gateway.accepting
            outcome = self._deferred_text if deferred else await self._settle_on_failure(entry, self._admit(entry))
        await self._settle_on_failure(entry, self._finish(entry, outcome))
        ending = Settlement.LEAVE if deferred else await _settlement(outcome)
        if ending is Settlement.LEAVE:
            log.info("inbox_entry_left_for_restart", source=self.source, entry=entry.id)
            return
        if ending is Settlement.RELEASE:  # another instance may run the session now: a takeover pass answers it
            await self.release(entry)
            return
        await self.settle(entry)

    async def _settle_on_failure(self, entry: InboxEntry, step: Awaitable[_T]) -> _T:
        """`step`'s result; a step that failed (not cancelled) settles the entry, so it never fails again after
        every restart, and re-raises for the task set's log."""
        try:
            return await step
        except Exception:
            await self.settle(entry)
            raise

    async def settle(self, entry: InboxEntry) -> None:
        """Mark `entry` answered; a failure is logged (the inbox writes it again once the store is back), never
        raised."""
        try:
            await self._inbox.settle(entry.id)
        except StorageError:
            log.error("inbox_settle_failed", source=self.source, entry=entry.id)

    async def release(self, entry: InboxEntry) -> None:
        """Give `entry` up, unsettled (`Inbox.release`); a failure is logged: the entry then stays this instance's."""
        try:
            await self._inbox.release(entry.id)
        except StorageError:
            log.error("inbox_release_failed", source=self.source, entry=entry.id)


async def _settlement(outcome: Outcome) -> Settlement:
    """The entry's settlement by the one rule (`channel.inbox_flow.settlement`); a text sent, or nothing: settled."""
    if not isinstance(outcome, ReplyHandle) or not outcome.finished:
        return Settlement.SETTLE
    return settlement(await outcome.result())


def resumable(entries: Iterable[InboxEntry], sources: Collection[str], *, channel: str) -> dict[str, list[InboxEntry]]:
    """`entries` grouped by the source (a gate) that answers them; one of no known source is logged and left."""
    grouped: dict[str, list[InboxEntry]] = {}
    for entry in entries:
        if entry.source in sources:
            grouped.setdefault(entry.source, []).append(entry)
        else:
            log.warning("inbox_unresumable", channel=channel, source=entry.source, entry=entry.id)
    return grouped
