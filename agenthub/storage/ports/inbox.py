"""The durable inbox's port (`Inbox`): accepted messages until answered, and the liveness it accepts under."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agenthub.storage.inbox import InboxEntry


class Liveness(Protocol):
    """An instance's liveness lease as its shared inbox sees it (`LeaseKeeper`)."""

    @property
    def held(self) -> bool:
        """Whether the lease is held now (by this instance's conservative clock)."""
        ...

    @property
    def hold(self) -> int | None:
        """The number of the current hold, None while not held: the same number means the lease stayed live in
        the store all along (so no other instance could take this one's entries over meanwhile)."""
        ...


class AnswerSettles(Protocol):
    """A shared inbox whose entries the session store settles in the statement that stores their answer (those
    answered by being stored: the HTTP API's without an idempotency key, design §12)."""

    @property
    def owner(self) -> str | None:
        """The instance that must still own an entry for the append to settle it (None: entries have no owner)."""
        ...

    def settled_with_answer(self, entry_ids: Collection[str]) -> None:
        """These entries were settled with their answer, as this instance's: their `settle` sends nothing, and
        `still_mine` is True for them."""
        ...


class Inbox(Protocol):
    """Accepted-but-unanswered messages. `accept` returns once the message is durable; `settle` marks it answered
    (after its answer is stored); `unsettled` lists what a restart must still answer, in acceptance order."""

    async def accept(self, source: str, payload: dict[str, Any], *, session: str | None = None) -> InboxEntry: ...

    async def assign(self, entry_id: str, session: str) -> None:
        """Name the session of an entry accepted without one (a push channel's, once routed); an entry that has one
        keeps it."""
        ...

    async def earlier_unsettled(self, session: str, entry_id: str) -> list[str]:
        """The ids of `session`'s unsettled entries accepted before `entry_id` (acceptance order); [] when
        `entry_id` is settled or unknown."""
        ...

    async def owners_alive(self, entry_ids: Collection[str]) -> bool | None:
        """Whether an instance that is alive (its liveness lease live) owns one of these unsettled entries: it will
        answer it, so a later entry of the session waits. False: none has (gone, or given up: the next takeover
        pass claims them). None: this inbox cannot tell (one inbox per instance: no other instance has them)."""
        ...

    async def settle(self, entry_id: str) -> None:
        """Mark the entry answered. A refused write raises StorageError and is retried by the inbox itself (bounded
        backoff, and at every `retry_settles`) until the store takes it; meanwhile the entry is not listed again."""
        ...

    async def release(self, entry_id: str) -> None:
        """Give up an entry this instance cannot answer now (its turn lost the session's lease): not settled, it
        is no longer this instance's, so the next takeover pass (any instance's) answers it. One inbox per
        instance: nothing to do (it stays unsettled, answered after the restart)."""
        ...

    async def still_mine(self, entry_id: str) -> bool:
        """Whether this instance may still answer the entry: False once another instance has claimed it (or it was
        settled). One inbox per instance: always True."""
        ...

    def accept_only_while(self, liveness: Liveness) -> None:
        """From now on `accept` refuses (StorageError) while `liveness.held` is False: a shared inbox's instance
        whose liveness lease lapsed would own entries the others see as orphans at once; and an entry seen to be
        this instance's stays so, without asking, for as long as the same hold lasts. One inbox per instance:
        no-op."""
        ...

    async def unsettled(self) -> list[InboxEntry]:
        """What this instance must still answer (its own entries), in acceptance order."""
        ...

    async def orphan_sources(self) -> set[str]:
        """The sources of unsettled entries whose instance is gone (a shared inbox; none for one of its own)."""
        ...

    async def claim_orphans(self, sources: Collection[str]) -> list[InboxEntry]:
        """Make this instance the owner of the unsettled entries of `sources` whose instance is gone, and return
        them in acceptance order; two instances claiming at once never get the same entry."""
        ...

    async def retry_settles(self) -> None:
        """Write the settles that were refused now (StorageError while the store still refuses)."""
        ...

    async def count(self) -> int:
        """How many accepted messages are not answered yet, on every instance (the store is asked)."""
        ...

    async def drop_settled(self) -> None:
        """Keep nothing of answered messages (a forget, a deleted session): StorageError when refused."""
        ...

    def depth(self) -> int:
        """How many accepted messages are not answered yet (for /metrics)."""
        ...

    async def aclose(self) -> None: ...
