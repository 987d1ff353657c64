"""The fake Feishu's contacts, served as `GET /open-apis/contact/v3/users/{user_id}` (contact v3 user get) answers
it: the shape lark-oapi's `GetUserRequest` sends and its `GetUserResponseBody` (`data.user`, a `User`) reads."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from tests.support.fakes.feishu import FakeFeishu

PATH = "/open-apis/contact/v3/users/{user_id}"
SCOPES_PATH = "/open-apis/contact/v3/scopes"
DENIED = (
    "Access denied. One of the following scopes is required: [contact:contact.base:readonly, "
    "contact:contact:access_as_app, contact:contact:readonly, contact:contact:readonly_as_app]."
)


class Contacts:
    """The tenant's users by open_id (`add`). `denied`: the app lacks every contact scope (99991672);
    `names_granted` False: it lacks 获取用户基本信息 (contact:user.base:readonly), so users come back without names.
    A user not added is outside the app's contact range (41050). Every call is recorded in `gets` as
    `(user_id, query)`; between `hold()` and `release()` calls are held open (a slow Feishu)."""

    def __init__(self) -> None:
        self.users: dict[str, dict[str, Any]] = {}
        self.denied = False
        self.names_granted = True
        self.gets: list[tuple[str, dict[str, str]]] = []
        self._held: asyncio.Event | None = None

    def add(self, open_id: str, name: str, en_name: str = "") -> None:
        self.users[open_id] = {
            "open_id": open_id,
            "union_id": f"on_{open_id}",
            "name": name,
            "en_name": en_name,
            "status": {"is_activated": True, "is_frozen": False, "is_resigned": False},
            "department_ids": ["od_1"],
        }

    def hold(self) -> None:
        self._held = asyncio.Event()

    def release(self) -> None:
        if self._held is not None:
            self._held.set()

    def mount(self, router: web.UrlDispatcher, fake: FakeFeishu) -> None:
        async def get_user(request: web.Request) -> web.Response:
            return await self._get(fake, request)

        async def list_scopes(request: web.Request) -> web.Response:
            return await self._scopes(fake, request)

        router.add_get(PATH, get_user)
        router.add_get(SCOPES_PATH, list_scopes)

    async def _scopes(self, fake: FakeFeishu, request: web.Request) -> web.Response:
        """The contact range (`GET /open-apis/contact/v3/scopes`, lark-oapi `ListScopeResponseBody`)."""
        entered = await fake._enter(request, "contact_scopes")
        if isinstance(entered, web.Response):
            return entered
        if self.denied:
            return web.json_response({"code": 99991672, "msg": DENIED}, status=400)
        data = {"department_ids": [], "user_ids": sorted(self.users), "group_ids": [], "has_more": False}
        return web.json_response({"code": 0, "msg": "success", "data": data})

    async def _get(self, fake: FakeFeishu, request: web.Request) -> web.Response:
        entered = await fake._enter(request, "contact_user")
        if isinstance(entered, web.Response):
            return entered
        user_id = request.match_info["user_id"]
        self.gets.append((user_id, dict(request.query)))
        if self._held is not None:
            await self._held.wait()
        if self.denied:
            return web.json_response({"code": 99991672, "msg": DENIED}, status=400)
        id_type = request.query.get("user_id_type", "open_id")
        if id_type not in ("open_id", "union_id", "user_id"):
            return web.json_response({"code": 99992402, "msg": "field validation failed"}, status=400)
        user = self.users.get(user_id) if id_type == "open_id" else None
        if user is None:
            return web.json_response({"code": 41050, "msg": "no user authority error"}, status=400)
        if not self.names_granted:
            user = {k: v for k, v in user.items() if k not in ("name", "en_name")}
        return web.json_response({"code": 0, "msg": "success", "data": {"user": user}})
