"""read_at_most: a download refused by its Content-Length before reading, or stopped as soon as it passes the cap."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestServer

from channels.toolkit.media import BodyTooLarge, read_at_most

CAP = 100_000


async def _sized(request: web.Request) -> web.StreamResponse:
    return web.Response(body=b"x" * int(request.query["n"]))


async def _endless(request: web.Request) -> web.StreamResponse:
    """Chunked, no Content-Length, never ends on its own: only a reader that stops early returns."""
    resp = web.StreamResponse()
    await resp.prepare(request)
    while True:
        await resp.write(b"y" * 16384)


@pytest_asyncio.fixture
async def base_url() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_get("/sized", _sized)
    app.router.add_get("/endless", _endless)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url(""))
    finally:
        await server.close()


async def test_a_body_within_the_cap_is_read_whole(base_url: str) -> None:
    async with aiohttp.ClientSession() as session, session.get(f"{base_url}/sized?n={CAP}") as resp:
        assert await read_at_most(resp, CAP) == b"x" * CAP


async def test_a_declared_size_over_the_cap_is_refused_with_that_size(base_url: str) -> None:
    async with aiohttp.ClientSession() as session, session.get(f"{base_url}/sized?n={CAP + 1}") as resp:
        with pytest.raises(BodyTooLarge) as info:
            await read_at_most(resp, CAP)
    assert info.value.declared == CAP + 1


async def test_an_undeclared_stream_is_stopped_at_the_cap(base_url: str) -> None:
    async with aiohttp.ClientSession() as session, session.get(f"{base_url}/endless") as resp:
        assert resp.content_length is None
        with pytest.raises(BodyTooLarge) as info:
            await read_at_most(resp, CAP)
    assert info.value.declared is None
