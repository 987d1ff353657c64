"""`RemoteGateway` against a daemon that answers something hostile: it fails cleanly, it never crashes or hangs."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp import web

from agenthub.messages import ErrorEvent, InboundMessage
from agenthub.remote import DaemonUnavailableError, RemoteGateway

NESTED = "[" * 100_000


async def _agents(request: web.Request) -> web.Response:
    return web.Response(text=NESTED, content_type="application/json")


async def _refused_chat(request: web.Request) -> web.Response:
    return web.Response(status=400, text=NESTED, content_type="application/json")


async def _streamed_chat(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(f"event: delta\ndata: {NESTED}\n\n".encode())
    await response.write_eof()
    return response


@pytest_asyncio.fixture
async def hostile_daemon() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_get("/api/agents", _agents)
    app.router.add_post("/api/agents/refused/chat", _refused_chat)
    app.router.add_post("/api/agents/streamed/chat", _streamed_chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


async def test_a_deeply_nested_agent_list_is_an_unavailable_daemon(hostile_daemon: str) -> None:
    async with RemoteGateway(hostile_daemon, "t", default_agent="default") as remote:
        with pytest.raises(DaemonUnavailableError):
            await remote.agent_names()


@pytest.mark.parametrize("agent", ["refused", "streamed"])
async def test_a_deeply_nested_chat_answer_ends_the_reply_with_an_error(hostile_daemon: str, agent: str) -> None:
    async with RemoteGateway(hostile_daemon, "t", default_agent=agent) as remote:
        handle = await remote.submit(InboundMessage("cli", "direct", "me", "hi"))
        final = await handle.result()
    assert isinstance(final, ErrorEvent)
    assert "[[[" not in final.message
