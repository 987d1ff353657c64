"""`RemoteGateway` against a daemon that answers something hostile: it fails cleanly, it never crashes or hangs."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from aiohttp import web

from agenthub.hosting.remote import DaemonUnavailableError, RemoteGateway
from agenthub.messages import DeltaEvent, ErrorCode, ErrorEvent, InboundMessage

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


async def _bad_usage_chat(request: web.Request) -> web.StreamResponse:
    """A stream whose text arrives whole but whose `done` frame carries a usage count that is not a number."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write('event: delta\ndata: {"text": "partial 答"}\n\n'.encode())
    await response.write(b'event: done\ndata: {"full_text": "x", "usage": {"input_tokens": "lots"}}\n\n')
    await response.write_eof()
    return response


async def _events_with_a_bad_frame(request: web.Request) -> web.StreamResponse:
    """A push feed: one good push, a frame that is not JSON, another good push, then the end."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(b'event: ready\ndata: {"session_key": "a:http:c"}\n\n')
    await response.write('event: push\ndata: {"content": "第一"}\n\n'.encode())
    await response.write(b"event: push\ndata: {oops\n\n")
    await response.write(b': keepalive\n\nevent: push\ndata: {"content": "second"}\n\n')
    await response.write_eof()
    return response


@pytest_asyncio.fixture
async def hostile_daemon() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_get("/api/agents", _agents)
    app.router.add_post("/api/agents/refused/chat", _refused_chat)
    app.router.add_post("/api/agents/streamed/chat", _streamed_chat)
    app.router.add_post("/api/agents/badusage/chat", _bad_usage_chat)
    app.router.add_get("/api/agents/pushy/sessions/c/events", _events_with_a_bad_frame)
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


async def test_a_done_frame_with_a_bad_field_is_a_bad_stream_not_an_unreachable_daemon(hostile_daemon: str) -> None:
    async with RemoteGateway(hostile_daemon, "t", default_agent="badusage") as remote:
        handle = await remote.submit(InboundMessage("cli", "direct", "me", "hi"))
        events = [event async for event in handle]
    assert events[0] == DeltaEvent("partial 答")
    final = events[-1]
    assert isinstance(final, ErrorEvent) and final.code == ErrorCode.BAD_STREAM
    assert "lots" not in final.message


async def test_a_malformed_push_frame_loses_no_later_push(hostile_daemon: str) -> None:
    async with RemoteGateway(hostile_daemon, "t", default_agent="pushy") as remote:
        pushes = [text async for text in remote.pushes("pushy", "c")]
    assert pushes == ["第一", "second"]
