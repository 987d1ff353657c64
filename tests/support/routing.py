"""A real gateway's routing for channel tests: which session each stored message was named, and its message's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway
from agenthub.messages import InboundMessage, Route
from tests.support.agents import write_agent

AGENTS = ("reviewer", "helper", "other")


class Naming:
    """A channel context's `session_of` on a gateway's routing that remembers each session it named."""

    def __init__(self, gateway: GatewayCore) -> None:
        self.gateway = gateway
        self.named: list[str | None] = []

    def __call__(self, route: Route) -> str | None:
        session = self.gateway.session_of(route)
        self.named.append(session)
        return session

    def sessions_of(self, messages: Iterable[InboundMessage]) -> list[str]:
        """The sessions the gateway runs these submitted messages in."""
        return [str(self.gateway.resolve_key(message)[1]) for message in messages]


@asynccontextmanager
async def naming(settings: Settings) -> AsyncIterator[Naming]:
    """The routing of a gateway on `settings` (its `bindings`), with the agents `AGENTS` besides the default."""
    for name in AGENTS:
        write_agent(settings.agents_dir, name)
    async with build_gateway(settings) as gateway:
        yield Naming(gateway)
