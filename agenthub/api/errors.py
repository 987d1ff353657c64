"""The API's error answers in the documented shape `{"error": {"code", "message"}}`, storage errors included."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import structlog
from aiohttp import web

from agenthub.errors import PathRefusedError, StorageError
from agenthub.jsonsafe import utf8_dumps
from agenthub.web import error_body

if TYPE_CHECKING:
    from agenthub.api.host import ApiServices

log = structlog.get_logger(__name__)


class ApiError(web.HTTPException):
    """An error answered in the documented shape `{"error": {"code", "message"}}`."""

    def __init__(self, status: int, code: str, message: str) -> None:
        self.status_code = status
        body = utf8_dumps(error_body(code, message))  # UTF-8 text, as the replies are
        super().__init__(text=body, content_type="application/json")


Route = Callable[["ApiServices", web.Request], Awaitable[web.Response]]
PATH_REFUSED = "this session's files are refused by the storage checks (a link inside data/); see the daemon log"
STORAGE_UNAVAILABLE = "the change could not be saved (the server's storage is full or not writable); try again later"


def refuses_storage_paths(handler: Route) -> Route:
    """Storage errors in the documented error shape, for this request only: a refused path (a symbolic link
    planted inside data/) is a 403, a write the disk refused (full, read-only) a 503. The log names the route;
    the message never carries the path or the exception."""

    @functools.wraps(handler)
    async def route(api: ApiServices, request: web.Request) -> web.Response:
        try:
            return await handler(api, request)
        except PathRefusedError:
            log.warning("storage_path_refused", path=request.path)
            raise ApiError(403, "path_refused", PATH_REFUSED) from None
        except StorageError as e:
            log.warning("storage_write_failed", path=request.path, error=repr(e.__cause__))
            raise ApiError(503, "storage_unavailable", STORAGE_UNAVAILABLE) from None

    return route
