"""Per-session arrival order across instances: the order is the durable inbox's acceptance order (`seq`). Holding
the session's lease, a turn runs only once the session's earlier unsettled entries are answered: one queued here
goes first; one another instance has (or will take over) is waited for with the lease let go, for as long as an
instance that is alive owns it (however slow it is; at most half the turn's time limit), and `lease_s / 2` once
none does (its instance died or gave it up: a takeover pass claims it meanwhile, and it is waited for again, or
goes first here). Waited for in vain, an entry is given up on once: it is remembered and keeps no later turn of
the session waiting again, so an entry no instance can resume costs its session one wait, not one per turn."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from agenthub.errors import StorageError
from agenthub.gateway.inbox_replay import INBOX_SESSION, inbox_id_of, stored_messages
from agenthub.gateway.runner import PendingTurn
from agenthub.gateway.session_lease import SessionLeases
from agenthub.messages import InboundMessage
from agenthub.session.history import SessionHistory
from agenthub.session_keys import SessionKey
from agenthub.storage.ports import Inbox

log = structlog.get_logger(__name__)

POLL_FIRST_S = 0.025
POLL_MAX_S = 0.25
ORPHANED_FRACTION = 2
"""Entries no live instance owns are waited for `lease_s / 2`: a takeover pass (every `lease_s / 3`) claims them
meanwhile, and the claim and resume have the rest."""


@dataclass
class _Wait:
    """How long one turn's order check still waits for the earlier entries held elsewhere, by what the inbox says
    of their owners (`owners_alive`)."""

    unknown_until: float
    """The inbox cannot tell (one inbox per instance, or entries without owners): `2 × lease_s`."""
    cap_until: float
    """An owner alive: at most until then (half the turn's time limit, at least `2 × lease_s`, from when the turn
    began)."""
    orphaned_s: float
    orphaned_since: float | None = None
    """Since when no live instance has owned them (None: one has, or not asked yet)."""

    def over(self, now: float, alive: bool | None) -> bool:
        if alive is None:
            return now >= self.unknown_until
        if alive:
            self.orphaned_since = None
            return now >= self.cap_until
        if self.orphaned_since is None:
            self.orphaned_since = now
        return now >= min(self.cap_until, self.orphaned_since + self.orphaned_s)


class ArrivalOrder:
    """The order check of the session worker (`ready`) and the routing step that names a pushed entry's session
    (`assign`), over the inbox the composition root gives the gateway (`inbox()`: None, nothing to order)."""

    def __init__(
        self,
        inbox: Callable[[], Inbox | None],
        history: SessionHistory,
        leases: SessionLeases,
        *,
        lease_s: float,
        turn_limit_s: Callable[[PendingTurn], float],
    ) -> None:
        """`turn_limit_s(pending)`: the turn's own time limit, which the wait counts against."""
        self._inbox = inbox
        self._history = history
        self._leases = leases
        self._lease_s = lease_s
        self._turn_limit_s = turn_limit_s
        self._given_up: dict[SessionKey, set[str]] = {}
        """Per session, the earlier entries waited for in vain; one is forgotten once a turn's check no longer
        finds it among the session's earlier unsettled entries (settled, or newer than that turn's)."""

    async def assign(self, message: InboundMessage, key: SessionKey) -> None:
        """Name the session of the entry `message` came in as, when it was accepted without one (a push channel's);
        a failure is logged: that entry then keeps no later one waiting."""
        inbox, entry_id = self._inbox(), inbox_id_of(message)
        if inbox is None or entry_id is None or INBOX_SESSION in message.metadata:
            return
        try:
            await inbox.assign(entry_id, str(key))
        except StorageError as e:
            log.warning("inbox_assign_failed", session_key=str(key), error=str(e))

    async def ready(self, pending: PendingTurn, queued: Sequence[PendingTurn]) -> bool:
        """Called holding the session's lease. True when the turn may run now. False when it must go back to the
        queue: an earlier entry waits in the local `queued` turns (it runs first), or one another instance has
        falls between the turn's own messages (its first message then runs alone: `alone`). While earlier
        entries are elsewhere, the lease is released and claimed again until they are answered or the wait is
        over (`_Wait`: then a warning, and the turn runs)."""
        inbox = self._inbox()
        ids = [i for m in pending.members if (i := inbox_id_of(m.message)) is not None]
        if inbox is None or not ids:
            return True
        wait = self._wait_for(pending)
        loop = asyncio.get_running_loop()
        delay = POLL_FIRST_S
        while True:
            before = await self._unanswered(inbox, pending.key, ids[0], set(ids))
            elsewhere = bool(before) and not self._queued_here(before, queued)
            if elsewhere and not wait.over(loop.time(), await inbox.owners_alive(before)):
                if delay == POLL_FIRST_S:
                    log.info("arrival_order_waiting", session_key=str(pending.key), waiting_for=len(before))
                self._leases.release_now(pending.key)  # the instance that has the earlier entry needs the session
                await asyncio.sleep(delay)
                delay = min(delay * 2, POLL_MAX_S)
                await self._leases.claim(pending.key)
                continue
            if elsewhere:
                gone = wait.orphaned_since is not None
                log.warning(
                    "arrival_order_gave_up", session_key=str(pending.key), waiting_for=len(before), owners_gone=gone
                )
                self._given_up.setdefault(pending.key, set()).update(before)
                return True
            between = await self._unanswered(inbox, pending.key, ids[-1], set(ids)) if len(ids) > 1 else []
            if self._queued_here([*before, *between], queued):
                return False
            if between:
                pending.members[0].alone = True
                return False
            return True

    def _wait_for(self, pending: PendingTurn) -> _Wait:
        """The cap counts from when the turn began (`pending.began`), not from now: the claim before this check
        may have waited for the session already, and the other half of the limit is the turn's own."""
        now, bound = asyncio.get_running_loop().time(), 2 * self._lease_s
        began = now if pending.began is None else now - max(0.0, time.monotonic() - pending.began)
        cap = max(bound, self._turn_limit_s(pending) / 2)
        return _Wait(now + bound, began + cap, self._lease_s / ORPHANED_FRACTION)

    @staticmethod
    def _queued_here(entry_ids: Sequence[str], queued: Sequence[PendingTurn]) -> bool:
        here = {inbox_id_of(p.message) for turn in queued for p in turn.members}
        return not here.isdisjoint(entry_ids)

    def _still_given_up(self, key: SessionKey, unsettled: Sequence[str]) -> set[str]:
        """The entries of `key` given up on that are still unsettled (the settled ones are forgotten here)."""
        given_up = self._given_up.get(key)
        if given_up is None:
            return set()
        given_up.intersection_update(unsettled)
        if not given_up:
            del self._given_up[key]
        return given_up

    async def _unanswered(self, inbox: Inbox, key: SessionKey, newest: str, members: set[str | None]) -> list[str]:
        """The session's entries accepted before `newest` that are neither this turn's nor answered in the history
        (an answered entry's settle may still be on its way)."""
        unsettled = await inbox.earlier_unsettled(str(key), newest)
        given_up = self._still_given_up(key, unsettled)  # once, not once per entry
        earlier = [i for i in unsettled if i not in members and i not in given_up]
        if not earlier:
            return []
        answered = stored_messages(await self._history.load(key), earlier)
        return [i for i in earlier if i not in answered or answered[i].answer is None]
