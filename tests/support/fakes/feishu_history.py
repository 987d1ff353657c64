"""The fake Feishu's record of messages, served as `GET /open-apis/im/v1/messages/{message_id}` answers it."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from aiohttp import web

from tests.support.fakes.feishu_payloads import compact_json

if TYPE_CHECKING:
    from tests.support.fakes.feishu import FakeFeishu

PATH = "/open-apis/im/v1/messages/{message_id}"


class MessageHistory:
    """Messages users sent (added by tests) plus the ones the bot sent through the fake; every GET is recorded
    in `gets` as `(message_id, query)`. Between `hold()` and `release()`, GETs are held open (a slow Feishu)."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.gets: list[tuple[str, dict[str, str]]] = []
        self._held: asyncio.Event | None = None

    def hold(self) -> None:
        self._held = asyncio.Event()

    def release(self) -> None:
        if self._held is not None:
            self._held.set()

    def add_user_message(
        self,
        message_id: str,
        content: dict[str, Any],
        *,
        msg_type: str = "text",
        sender: str = "ou_user1",
        chat_id: str = "oc_chat1",
        mentions: list[dict[str, str]] | None = None,
    ) -> None:
        """A message a user sent earlier; `mentions` items as this API gives them: `{key, id, name}`."""
        self.items[message_id] = {
            "message_id": message_id,
            "msg_type": msg_type,
            "chat_id": chat_id,
            "create_time": "1700000000000",
            "deleted": False,
            "updated": False,
            "sender": {"id": sender, "id_type": "open_id", "sender_type": "user", "tenant_key": "tk_1"},
            "body": {"content": compact_json(content)},
            "mentions": [{**m, "id_type": "open_id", "tenant_key": "tk_1"} for m in mentions or []],
        }

    def mount(self, router: web.UrlDispatcher, fake: FakeFeishu) -> None:
        async def get_message(request: web.Request) -> web.Response:
            return await self._get(fake, request)

        router.add_get(PATH, get_message)

    async def _get(self, fake: FakeFeishu, request: web.Request) -> web.Response:
        entered = await fake._enter(request, "message_get")
        if isinstance(entered, web.Response):
            return entered
        message_id = request.match_info["message_id"]
        self.gets.append((message_id, dict(request.query)))
        if self._held is not None:
            await self._held.wait()
        item = self.items.get(message_id) or _bot_item(fake, message_id, app_id=entered[0])
        if item is None:
            body = {
                "code": 230001,
                "msg": "Your request contains an invalid request parameter, ext=invalid message_id.",
            }
            return web.json_response(body, status=400)
        return web.json_response({"code": 0, "msg": "success", "data": {"items": [item]}})


def _bot_item(fake: FakeFeishu, message_id: str, *, app_id: str) -> dict[str, Any] | None:
    """A message the bot sent through the fake (sent by the asking app: tests using this run one app)."""
    sent = next((m for m in fake.messages if m.message_id == message_id), None)
    if sent is None:
        return None
    return {
        "message_id": message_id,
        "msg_type": sent.msg_type,
        "chat_id": "oc_chat1",
        "sender": {"id": app_id, "id_type": "app_id", "sender_type": "app", "tenant_key": "tk_1"},
        "body": {"content": compact_json(sent.content)},
        "mentions": [],
    }
