"""The fake Feishu's message resources, served as `GET /open-apis/im/v1/messages/{message_id}/resources/{file_key}`
serves them: the bytes with Content-Type and Content-Disposition, JSON `{code, msg}` errors, a tenant token check."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal
from urllib.parse import quote

from aiohttp import web

if TYPE_CHECKING:
    from tests.support.fakes.feishu import FakeFeishu

PATH = "/open-apis/im/v1/messages/{message_id}/resources/{file_key}"
FILE_NOT_IN_MESSAGE = 234003


@dataclass
class Resource:
    """One image or file of one message. With `chunked_size`, it is sent without a Content-Length as `data`
    repeated until that many bytes (a huge body without holding it in memory)."""

    kind: Literal["image", "file"]
    data: bytes
    content_type: str
    file_name: str = ""
    chunked_size: int = 0


class MessageResources:
    """Resources by `(message_id, file_key)`; every GET is recorded in `gets` as `(message_id, file_key, type)`.
    Between `hold()` and `release()` answers are held back (a slow Feishu); `completed` lists the keys whose
    whole body was written (a client that stops reading leaves a chunked body unfinished)."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str], Resource] = {}
        self.gets: list[tuple[str, str, str]] = []
        self.completed: list[str] = []
        self._held: asyncio.Event | None = None

    def add(self, message_id: str, file_key: str, resource: Resource) -> None:
        self.items[(message_id, file_key)] = resource

    def hold(self) -> None:
        self._held = asyncio.Event()

    def release(self) -> None:
        if self._held is not None:
            self._held.set()

    def mount(self, router: web.UrlDispatcher, fake: FakeFeishu) -> None:
        async def get_resource(request: web.Request) -> web.StreamResponse:
            return await self._get(fake, request)

        router.add_get(PATH, get_resource)

    async def _get(self, fake: FakeFeishu, request: web.Request) -> web.StreamResponse:
        entered = await fake._enter(request, "message_resource")
        if isinstance(entered, web.Response):
            return entered
        message_id, file_key = request.match_info["message_id"], request.match_info["file_key"]
        kind = request.query.get("type", "")
        self.gets.append((message_id, file_key, kind))
        if self._held is not None:
            await self._held.wait()
        if kind not in ("image", "file"):
            body = {"code": 234001, "msg": "Invalid request param."}
            return web.json_response(body, status=400)
        resource = self.items.get((message_id, file_key))
        if resource is None or resource.kind != kind:
            return web.json_response({"code": FILE_NOT_IN_MESSAGE, "msg": "File not in msg."}, status=400)
        headers = {"Content-Type": resource.content_type, "Content-Disposition": _disposition(resource, file_key)}
        if not resource.chunked_size:
            return web.Response(body=resource.data, headers=headers)
        return await self._stream(request, resource, headers, file_key)

    async def _stream(
        self, request: web.Request, resource: Resource, headers: dict[str, str], file_key: str
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers=headers)
        response.enable_chunked_encoding()
        await response.prepare(request)
        sent = 0
        while sent < resource.chunked_size:
            await response.write(resource.data)
            sent += len(resource.data)
        await response.write_eof()
        self.completed.append(file_key)
        return response


def _disposition(resource: Resource, file_key: str) -> str:
    name = resource.file_name or file_key
    return f"attachment; filename=\"{quote(name)}\"; filename*=UTF-8''{quote(name)}"
