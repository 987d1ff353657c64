"""The Channel protocol the core consumes, and the context a channel is built with."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from aiohttp import web

from agenthub.messages import InboundMessage, OutboundMessage, Route
from agenthub.storage.inbox import InboxEntry, InMemoryInbox
from agenthub.storage.ports import Inbox, Outbox
from agenthub.storage.singleton import InstanceLeases

if TYPE_CHECKING:
    from agenthub.config import Settings
    from agenthub.gateway.handle import ReplyHandle
    from agenthub.storage.dedup import SeenIdsOpener
    from agenthub.storage.member_sends import MemberSendsOpener


class Submitter(Protocol):
    """What a channel needs from the gateway: submit a message, get its reply stream."""

    @property
    def accepting(self) -> bool:
        """False once the daemon drains for shutdown: `submit()` then only answers "restarting". A channel whose
        platform redelivers unacknowledged events should leave new ones unacknowledged instead."""
        ...

    async def submit(self, message: InboundMessage) -> ReplyHandle: ...


@runtime_checkable
class Channel(Protocol):
    """One platform adapter.

    `start()` connects (long connections, token checks) and must not raise for one bad credential: it logs
    and carries on with the others. `send()` delivers a proactive message and raises `ChannelSendError`
    on failure so callers can decide about retries. `stop()` is idempotent.
    """

    name: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send(self, message: OutboundMessage) -> None: ...


@runtime_checkable
class ResumableChannel(Protocol):
    """A channel that answers, after a restart, the messages it had accepted into the inbox and not settled.

    `resume` gets its entries (every source whose first segment is the channel's name) in acceptance order: at a
    restart *before* `start()` (it must then answer them once started, ahead of what arrives meanwhile in the same
    chat), and again whenever entries of a stopped instance are taken over. It processes each as if it had just
    arrived, minus dedup and acknowledgement, keeping per-chat order, and settles each as it does a fresh one.
    `can_resume(source)` says whether this instance can answer that source's entries (a shared inbox hands it
    only those): e.g. a WeCom AI bot's only where its connection is.
    """

    name: str

    def can_resume(self, source: str) -> bool: ...

    async def resume(self, entries: list[InboxEntry]) -> None: ...


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

SessionResolver = Callable[[Route], "str | None"]
"""The session (`agent:channel:chat_id`) a message of that route will run in, None when it cannot be routed
(`GatewayCore.session_of`: the rule that routes the submitted message)."""


@dataclass
class WebRoutes:
    """Routes channels mount on the daemon's one HTTP server; collected before the server starts."""

    routes: list[web.AbstractRouteDef] = field(default_factory=list)

    def add(self, method: str, path: str, handler: Handler) -> None:
        self.routes.append(web.route(method, path, handler))


@dataclass
class ChannelContext:
    """Everything a channel is built with; channels never construct core services themselves."""

    gateway: Submitter
    settings: Settings
    web: WebRoutes
    state_dir: Path
    """A private directory for the channel's durable state (dedup memory, tokens): `data/.channels/<name>/`."""
    inbox: Inbox = field(default_factory=InMemoryInbox)
    """Where a message is stored before the platform is acknowledged (design §12); the daemon's is durable."""
    leases: InstanceLeases = field(default_factory=InstanceLeases)
    """The deployment's leases, for what only one instance may hold (a WeCom AI bot's long connection)."""
    open_seen_ids: SeenIdsOpener | None = None
    """Opens the channel's dedup memories in the deployment's store (`[store]`); None: files in `state_dir`."""
    open_member_sends: MemberSendsOpener | None = None
    """Opens the channel's per-member send counts shared by every instance (`[store]` postgres); None: counted in
    this process only."""
    outbox: Outbox | None = None
    """Sends that only another instance can make (it holds the connection); None: this instance holds them all."""
    session_of: SessionResolver | None = None
    """Names the session of a message's route as the gateway will route the message, so the inbox stores each
    entry with its session when it is accepted: its place in the session's arrival order across instances from
    that moment, not only once submitted (after its media download). None: the gateway names it at submit."""


class ChannelFactory(Protocol):
    """A channel class: built from the context and its own raw config table (`[channels.<name>]`)."""

    def __call__(self, context: ChannelContext, config: Mapping[str, Any]) -> Channel: ...
