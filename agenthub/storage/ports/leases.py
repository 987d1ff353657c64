"""The leases' ports: acquire, renew, release (`LeaseStore`), renewed in batches, or asked for by another holder."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from agenthub.storage.lease import Lease


class LeaseStore(Protocol):
    async def acquire(self, name: str, holder: str, ttl_s: float) -> Lease | None:
        """The lease of `name` for `holder`: granted when free, expired or already `holder`'s (then renewed, same
        token); None while another holder's lease is live."""
        ...

    async def renew(self, lease: Lease, ttl_s: float) -> Lease | None:
        """The lease extended by `ttl_s`; None when it was lost (expired and granted to another holder)."""
        ...

    async def release(self, lease: Lease) -> None:
        """Give the lease up (a no-op when it was lost already)."""
        ...


@runtime_checkable
class BatchRenewal(Protocol):
    """A lease store that renews many leases in one request."""

    async def renew_many(self, leases: list[Lease], ttl_s: float) -> list[Lease | None]:
        """Each lease extended by `ttl_s` (None: lost), in one request to the store: what an instance holding
        many session leases renews them with, so their renewals do not queue behind each other."""
        ...


@runtime_checkable
class LeaseSignals(Protocol):
    """A store whose holders can be asked for a lease: a session lease is then kept while its instance has no
    more work for it (no acquire, fence and release per turn) and given up the moment another instance asks."""

    async def acquire_or_ask(self, name: str, holder: str, ttl_s: float) -> Lease | None:
        """`acquire`; when another holder's lease is live, that holder is signalled (`WANTED`, `name`) in the same
        request."""
        ...

    async def listen(self, on_signal: Callable[[str, str], None]) -> None:
        """Call `on_signal(kind, name)` for every `WANTED` and `FREED` signal of every holder until cancelled
        (reconnecting after a failure: signals sent meanwhile are missed, so they only ever hasten things)."""
        ...


@runtime_checkable
class LiveHolders(Protocol):
    """A lease store that lists who holds the live leases of a kind (PostgreSQL: the instances alive, by their
    `instance:<holder>` leases)."""

    async def live_holders(self, prefix: str) -> list[str]:
        """The holders of the leases named `prefix…` that are live now (by the store's clock)."""
        ...
