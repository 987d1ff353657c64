"""An in-process daemon for HTTP tests: gateway + web server + channels exactly as `agenthub serve` wires them."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest_asyncio

from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import assemble, build_services, open_stores
from agenthub.web import WebServer


@dataclass
class RunningApi:
    base_url: str
    token: str
    gateway: GatewayCore
    server: WebServer
    client: aiohttp.ClientSession

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def call(self, method: str, path: str, **kw: Any) -> tuple[int, Any]:
        """One API call with the token; returns (status, parsed JSON or text or None)."""
        headers = {**self.auth, **kw.pop("headers", {})}
        async with self.client.request(method, self.base_url + path, headers=headers, **kw) as resp:
            if resp.status == 204:
                return resp.status, None
            if resp.content_type == "application/json":
                return resp.status, await resp.json()
            return resp.status, await resp.text()


@pytest_asyncio.fixture
async def api(settings: Settings) -> AsyncIterator[RunningApi]:
    async with running_api(settings) as running:
        yield running


@asynccontextmanager
async def running_api(settings: Settings) -> AsyncIterator[RunningApi]:
    """The daemon's server and channels on `settings` (any port), with a token named `test`."""
    settings = settings.model_copy(update={"http": settings.http.model_copy(update={"port": 0})})
    stores = await open_stores(settings)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(stores.aclose)
        # one database for every instance: each its own token; the files: one named `test`
        shared = stores.shared_between_instances
        token = await stores.tokens.create(f"test-{secrets.token_hex(4)}" if shared else "test")
        services = await stack.enter_async_context(build_services(settings, stores=stores, inbox=stores.inbox))
        gateway = services.gateway
        server, channels = assemble(settings, services, stores)
        await server.start()
        for channel in channels:
            await channel.start()
        server.ready = True
        async with aiohttp.ClientSession() as client:
            yield RunningApi(f"http://127.0.0.1:{server.port}", token, gateway, server, client)
        for channel in reversed(channels):
            await channel.stop()
        await server.close()
