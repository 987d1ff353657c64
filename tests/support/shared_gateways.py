"""Several `GatewayCore`s in one process over one PostgreSQL database: each its own `Stores` (its own pool), its own
holder id on a lease store, its own durable-inbox submitter: instances of one deployment, for the session-lease
tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agenthub.channel.inbox_flow import HTTP_SOURCE, InboxSubmitter
from agenthub.clock import Clock, monotonic_clock
from agenthub.gateway.core import GatewayCore
from agenthub.gateway.handle import ReplyHandle
from agenthub.hosting.app import Services, build_services, open_stores
from agenthub.messages import InboundMessage
from agenthub.session_keys import SessionKey
from agenthub.storage.ports import LeaseStore
from agenthub.storage.postgres import PostgresInbox, PostgresSessionStore
from agenthub.storage.postgres.backend import PostgresStores
from agenthub.storage.singleton import InstanceLeases
from agenthub.storage.stores import Stores
from tests.support.fakes.anthropic import FakeAnthropic, RecordedRequest, ScriptedReply, last_user_text, reply_text
from tests.support.roots import make_settings


@dataclass
class Instance:
    """One instance: its gateway, its stores and the submitter that stores each message in the shared inbox."""

    name: str
    gateway: GatewayCore
    stores: Stores
    submitter: InboxSubmitter
    services: Services
    """The gateway with the features the composition root built around it."""

    async def send(self, message: InboundMessage) -> ReplyHandle:
        """Accept `message` into the shared inbox (its session known at once, as the HTTP route does), then submit."""
        return await self.submitter.submit(HTTP_SOURCE, message)


@asynccontextmanager
async def shared_instances(
    root: Path,
    fake: FakeAnthropic,
    dsn: str,
    count: int,
    *,
    lease_stores: list[LeaseStore] | None = None,
    clocks: list[Clock] | None = None,
    lease_s: float = 15.0,
    owned: bool = False,
    **overrides: Any,
) -> AsyncIterator[list[Instance]]:
    """`count` instances on database `dsn`, each in its own directory under `root`; their session leases in
    `lease_stores[n]` (default: the database's `leases` table through each instance's own pool), judged on
    `clocks[n]` (default: the monotonic clock). `owned`: each instance owns the entries it accepts (its holder
    name), as a daemon's inbox does; else the entries have no owner."""
    async with AsyncExitStack() as stack:
        found: list[Instance] = []
        for n in range(count):
            store = {"backend": "postgres", "dsn": dsn, "lease_s": lease_s}
            settings = make_settings(root / f"instance-{n}", fake.base_url, store=store, **overrides)
            stores = await open_stores(settings)
            stack.push_async_callback(stores.aclose)
            lease_store = stores.leases if lease_stores is None else lease_stores[n]
            clock = monotonic_clock if clocks is None else clocks[n]
            holder = f"instance-{n}"
            leases = InstanceLeases(lease_store, holder=holder, ttl_s=lease_s, clock=clock)
            assert isinstance(stores, PostgresStores)
            inbox = PostgresInbox(stores.database, owner=holder if owned else None)
            built = build_services(settings, stores=stores, leases=leases, inbox=inbox)
            services = await stack.enter_async_context(built)
            gateway = services.gateway
            submitter = InboxSubmitter(inbox, gateway, resolve=gateway.session_of)
            stack.push_async_callback(submitter.aclose)
            found.append(Instance(f"instance-{n}", gateway, stores, submitter, services))
        yield found


def sessions_of(instance: Instance) -> PostgresSessionStore:
    store = instance.stores.sessions
    assert isinstance(store, PostgresSessionStore)
    return store


async def lease_row(instance: Instance, chat: str) -> tuple[int, bool]:
    """The session's lease token and whether it is free now."""
    async with sessions_of(instance).database.connection("read the lease") as conn:
        cursor = await conn.execute(
            "SELECT token, expires_at <= now() FROM leases WHERE name = %s", [f"session:{key_of(chat)}"]
        )
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0]), bool(row[1])


def message(chat: str, text: str) -> InboundMessage:
    """An HTTP message of `me` in `chat`."""
    return InboundMessage("http", chat, "me", text)


def key_of(chat: str) -> SessionKey:
    """The default agent's session of the HTTP `chat`."""
    return SessionKey("default", "http", chat)


def tag_of(text: str) -> str:
    """`s3-m1` of a message text `s3-m1` (a request's last user text carries a `[time, via channel]` suffix)."""
    return text.split("\n\n[")[0].strip()


def user_tags(request: RecordedRequest) -> list[str]:
    """The user texts of a request to the model, in order (their `[time, via channel]` suffixes cut)."""
    assert request.body is not None
    tags: list[str] = []
    for m in request.body["messages"]:
        if m["role"] != "user":
            continue
        content = m["content"]
        blocks = (
            [content] if isinstance(content, str) else [b.get("text", "") for b in content if b.get("type") == "text"]
        )
        tags.extend(tag_of(text) for text in blocks if text.strip())
    return tags


def session_of_tag(tag: str) -> str:
    return tag.split("-")[0]


@dataclass
class HeldModel:
    """The fake model's answers held at one event, and the overlaps it saw: a request of a session arriving while
    another request of the same session is still being answered."""

    fake: FakeAnthropic
    release: asyncio.Event = field(default_factory=asyncio.Event)
    overlaps: list[str] = field(default_factory=list)
    session_of: Callable[[str], str] = session_of_tag

    def install(self) -> None:
        self.fake.responder = self._answer

    def _answer(self, body: dict[str, Any]) -> ScriptedReply:
        tag = tag_of(last_user_text(body))
        session = self.session_of(tag)
        in_flight = [r for r in self.fake.message_requests() if _open(r) and self._session_of_request(r) == session]
        if len(in_flight) > 1:  # this request is one of them
            self.overlaps.append(session)
        return reply_text(f"answer to {tag}", hold=self.release)

    def _session_of_request(self, request: RecordedRequest) -> str | None:
        body = request.body
        if not isinstance(body, dict) or "messages" not in body:
            return None
        return self.session_of(tag_of(last_user_text(body)))


def _open(request: RecordedRequest) -> bool:
    return not request.completed.is_set() and not request.disconnected.is_set()
