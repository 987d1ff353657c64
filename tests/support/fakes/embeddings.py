"""A fake OpenAI-compatible embeddings endpoint on 127.0.0.1 (port 0): `POST /v1/embeddings` answers deterministic
vectors, a hashed bag of words in which a few words share a concept (car, automobile, vehicle, sedan), the way a
real model places a paraphrase near its original. `down` answers 503, `delay_s` answers late."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio
from aiohttp import web

DIMS = 256
CONCEPTS = {
    "automobile": "car",
    "vehicle": "car",
    "sedan": "car",
    "cars": "car",
    "drives": "drive",
    "driving": "drive",
    "汽车": "car",
    "车": "car",
}
_WORD = re.compile(r"[a-z0-9]+|[\u4e00-\u9fff]+")


def embed(text: str, dims: int = DIMS) -> list[float]:
    vector = [0.0] * dims
    for word in _WORD.findall(text.lower()):
        concept = CONCEPTS.get(word, word)
        slot = int.from_bytes(hashlib.sha256(concept.encode()).digest()[:4], "big") % dims
        vector[slot] += 1.0
    return vector


class FakeEmbeddings:
    def __init__(self, dims: int = DIMS) -> None:
        self.dims = dims
        self.down = False
        self.delay_s = 0.0
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def inputs(self) -> list[str]:
        return [text for body in self.requests for text in body.get("input", [])]

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/embeddings", self._embeddings)
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.down:
            return web.json_response({"error": {"message": "overloaded"}}, status=503)
        data = [
            {"object": "embedding", "index": i, "embedding": embed(t, self.dims)} for i, t in enumerate(body["input"])
        ]
        data.reverse()  # the index, not the order, says which input each is for
        return web.json_response({"object": "list", "model": body["model"], "data": data})


@pytest_asyncio.fixture
async def fake_embeddings() -> AsyncIterator[FakeEmbeddings]:
    server = FakeEmbeddings()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
