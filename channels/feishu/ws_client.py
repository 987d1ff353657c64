"""lark-oapi's long-connection client, with its endpoint request bounded in time and run off the lark-ws loop."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from typing import Any

import lark_oapi.ws.client as ws_mod
import requests
import structlog

log = structlog.get_logger(__name__)

# SDK internals relied on (lark-oapi >=1.7.5,<1.8; read from lark_oapi/ws/client.py 1.7.5):
# - `Client._connect()` is the only caller of `self._get_conn_url()`, and calls it synchronously on the loop
#   (at connect, and on every reconnect via `_reconnect()` -> `_try_connect()` -> `self._connect()`);
# - `_get_conn_url()` posts with the module-level name `requests.post(url, headers=..., json=...)` and no
#   timeout, raises `ClientException` for bad credentials, and applies the answer's `ClientConfig`;
# - `_connect()` skips everything when `self._conn` is already set (leaving its lock held);
# - `_reconnect()` is where a reconnect's `ClientException` (via `_try_connect`) ends the reconnect task;
# - `_disconnect()` closes `self._conn` and sets it to None; `_auto_reconnect` stops the receive loop reconnecting.
# If an upgrade changes these, `test_a_hanging_endpoint_request_neither_stalls_other_apps_nor_blocks_forever`
# in tests/channels/feishu/test_ws.py fails.

_ENDPOINT_TIMEOUT: contextvars.ContextVar[float | None] = contextvars.ContextVar("feishu_ws_endpoint_timeout")


class _TimedRequests:
    """Stands in for the `requests` module inside `lark_oapi.ws.client`: `post` gets the timeout of the
    calling context (set by `BoundedWsClient`), everything else is plain `requests`."""

    def __getattr__(self, name: str) -> Any:
        return getattr(requests, name)

    def post(self, url: str, **kwargs: Any) -> requests.Response:
        timeout = _ENDPOINT_TIMEOUT.get(None)
        if timeout is not None:
            kwargs.setdefault("timeout", timeout)
        return requests.post(url, **kwargs)


def _install_timeout_shim() -> None:
    if not isinstance(ws_mod.requests, _TimedRequests):
        ws_mod.requests = _TimedRequests()


class BoundedWsClient(ws_mod.Client):  # type: ignore[misc]  # lark-oapi ships no type information
    """`lark_oapi.ws.Client` whose endpoint request (`POST /callback/ws/endpoint`) runs in a worker thread
    with a timeout, so one app whose endpoint hangs cannot freeze pings and ACKs of the others sharing the
    lark-ws loop. A timed-out request fails the connect like any other error, and the SDK retries it."""

    def __init__(self, *args: Any, endpoint_timeout_s: float, dead_after_s: float, **kwargs: Any) -> None:
        _install_timeout_shim()
        super().__init__(*args, **kwargs)
        self._endpoint_timeout_s = endpoint_timeout_s
        self._endpoint_url: str | None = None
        self.dead_after_s = dead_after_s
        """How long the connection may stay down (the SDK reconnecting) before the client counts as lost."""
        self.gave_up: BaseException | None = None
        """Why the SDK's reconnecting ended for good (a refused endpoint raises out of its reconnect task)."""
        self.lost = asyncio.Event()
        self.retired = False
        self._reconnecting: set[asyncio.Task[Any]] = set()

    async def _connect(self) -> None:
        if self.retired:
            raise ConnectionError("client retired")
        if self._conn is None:
            self._endpoint_url = await self._fetch_endpoint()
        await super()._connect()

    async def _reconnect(self) -> None:
        """The SDK's reconnect, which ends its task on a client error (revoked secret, "exceed conn limit") with
        nobody to hear it but the loop's exception handler: record why, so the runner sees the client is lost."""
        task = asyncio.current_task()
        if task is not None:
            self._reconnecting.add(task)
        try:
            await super()._reconnect()
        except Exception as e:
            self.gave_up = e
            self.lost.set()
            raise
        finally:
            if task is not None:
                self._reconnecting.discard(task)

    async def retire(self, timeout_s: float = 2.0) -> None:
        """Stop for good: no more reconnects, the connection closed (so Feishu sends this app's events to the
        replacement, not to a stale connection). Bounded in time; runs on the lark-ws loop."""
        self.retired = True
        self._auto_reconnect = False
        current = asyncio.current_task()
        for task in list(self._reconnecting):
            if task is not current:
                task.cancel()
        try:
            await asyncio.wait_for(self._disconnect(), timeout_s)
        except Exception as e:  # the SDK lock can be left held (see above): close the socket directly
            log.warning("feishu_ws_retire_forced", app_id=self._app_id, error=repr(e))
            conn: Any = getattr(self, "_conn", None)
            self._conn = None
            if conn is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(conn.close(), timeout_s)

    async def _fetch_endpoint(self) -> str:
        timeout_s = self._endpoint_timeout_s
        token = _ENDPOINT_TIMEOUT.set(timeout_s)  # asyncio.to_thread copies the context into the worker
        try:
            # requests applies the timeout to connecting and to reading separately: 2x bounds the whole call
            url = await asyncio.wait_for(asyncio.to_thread(super()._get_conn_url), 2 * timeout_s)
        except TimeoutError:
            log.warning("feishu_ws_endpoint_timeout", app_id=self._app_id, timeout_s=timeout_s)
            raise
        finally:
            _ENDPOINT_TIMEOUT.reset(token)
        return str(url)

    def _get_conn_url(self) -> str:
        url, self._endpoint_url = self._endpoint_url, None
        if url is not None:
            return url
        log.warning("feishu_ws_endpoint_fetched_on_loop", app_id=self._app_id)  # an SDK path we did not expect
        token = _ENDPOINT_TIMEOUT.set(self._endpoint_timeout_s)
        try:
            return str(super()._get_conn_url())
        finally:
            _ENDPOINT_TIMEOUT.reset(token)
