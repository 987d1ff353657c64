"""The fake WeCom's members, served as `GET cgi-bin/user/get?access_token=…&userid=…` (读取成员) answers it."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from tests.support.fakes.wecom import FakeQyApi


class Members:
    """The corp's members an app may read (`add`); others are outside its visible range (60011) or unknown (60111).
    Every call is recorded in `gets` (the userid asked); `errcodes` queues errcodes for the next calls; between
    `hold()` and `release()` calls are held open (a slow WeCom)."""

    def __init__(self) -> None:
        self.visible: dict[str, dict[str, Any]] = {}
        self.hidden: set[str] = set()
        self.gets: list[str] = []
        self.errcodes: list[int] = []
        self._held: asyncio.Event | None = None

    def add(self, userid: str, name: str, *, visible: bool = True) -> None:
        """A member; `visible` False: outside the app's visible range (可见范围)."""
        if visible:
            self.visible[userid] = {"userid": userid, "name": name, "department": [1], "position": "", "status": 1}
        else:
            self.hidden.add(userid)

    def hold(self) -> None:
        self._held = asyncio.Event()

    def release(self) -> None:
        if self._held is not None:
            self._held.set()

    def mount(self, router: web.UrlDispatcher, fake: FakeQyApi) -> None:
        async def user_get(request: web.Request) -> web.Response:
            return await self._get(fake, request)

        router.add_get("/cgi-bin/user/get", user_get)

    async def _get(self, fake: FakeQyApi, request: web.Request) -> web.Response:
        token, userid = request.query.get("access_token", ""), request.query.get("userid", "")
        self.gets.append(userid)
        await fake._changed()
        if self._held is not None:
            await self._held.wait()
        if token not in fake.tokens_issued:
            return _error(40014, "invalid access_token")
        if token in fake.expired:
            return _error(42001, "access_token expired")
        if self.errcodes:
            code = self.errcodes.pop(0)
            return _error(code, f"injected {code}")
        if not userid:
            return _error(41009, "missing userid")
        if userid in self.hidden:
            return _error(60011, "no privilege to access/modify contact/party/agent")
        member = self.visible.get(userid)
        if member is None:
            return _error(60111, "invalid string value `userid`. userid not found")
        return web.json_response({"errcode": 0, "errmsg": "ok", **member})


def _error(code: int, errmsg: str) -> web.Response:
    """WeCom answers API errors with HTTP 200 and an errcode body."""
    return web.json_response({"errcode": code, "errmsg": errmsg})
