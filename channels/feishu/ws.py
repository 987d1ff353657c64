"""Runs every long-connection app's lark-oapi `ws.Client` on one private thread and event loop."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog

from channels.feishu.sdk import route_sdk_logging

log = structlog.get_logger(__name__)


class WsRunner:
    """Owns the `lark-ws` thread.

    lark-oapi's `ws.Client` runs on the module-global `lark_oapi.ws.client.loop` and `start()` blocks
    forever, so all clients share one thread whose fresh loop is installed as that global before anything
    runs. Each client is driven like `start()` does (connect, reconnect, ping loop) but as a task, so
    several apps can share the loop, and `stop()` disconnects them (auto-reconnect off) and ends the thread.
    A client that is lost for good (it cannot connect, or its reconnecting ends) is retired and reported
    through `on_failed(cred_id, error)`; `add()` for that app later drives a replacement.
    """

    def __init__(self) -> None:
        self._clients: dict[str, Any] = {}
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._closed = False
        self._driving: dict[str, asyncio.Task[None]] = {}
        """Touched only on the lark-ws loop: the `_drive` task of every client launched there."""
        self._driven: dict[str, Any] = {}
        """Touched only on the lark-ws loop: the client each `_driving` task drives."""
        self.on_failed: Callable[[str, str], None] = lambda cred_id, error: None

    @property
    def clients(self) -> dict[str, Any]:
        """The current client of each app (a copy)."""
        return dict(self._clients)

    def add(
        self,
        cred_id: str,
        app_id: str,
        app_secret: str,
        domain: str,
        dispatcher: Any,
        *,
        endpoint_timeout_s: float,
        dead_after_s: float,
    ) -> None:
        """Add an app's client, or replace the one it had (the old one is retired once the new one runs)."""
        from channels.feishu.ws_client import BoundedWsClient

        self._clients[cred_id] = BoundedWsClient(
            app_id,
            app_secret,
            event_handler=dispatcher,
            domain=domain,
            auto_reconnect=True,
            endpoint_timeout_s=endpoint_timeout_s,
            dead_after_s=dead_after_s,
        )
        route_sdk_logging()  # the constructor resets the SDK logger's level
        loop = self._loop
        if self._thread is not None and loop is not None and not loop.is_closed():  # a late app (a start retry)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._launch, cred_id)

    def start(self) -> None:
        """Start the thread once there is a client; a no-op when it runs already or after `stop()`."""
        if not self._clients or self._thread is not None or self._closed:
            return
        self._thread = threading.Thread(target=self._main, name="lark-ws", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=10)

    async def stop(self, timeout_s: float = 10.0) -> None:
        self._closed = True
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None:
            return
        self._thread = None
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        await asyncio.to_thread(thread.join, timeout_s)
        if thread.is_alive():
            log.warning("feishu_ws_thread_stuck", timeout_s=timeout_s)

    def _main(self) -> None:
        import lark_oapi.ws.client as ws_mod

        loop = asyncio.new_event_loop()
        ws_mod.loop = loop
        asyncio.set_event_loop(loop)
        loop.set_exception_handler(_quiet_exception)
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except Exception as e:
            log.error("feishu_ws_thread_failed", error=repr(e))
        finally:
            loop.close()
            self._ready.set()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        for cred_id in list(self._clients):
            self._launch(cred_id)
        self._ready.set()
        await self._stop.wait()
        clients = list(self._clients.values())
        for client in clients:
            client._auto_reconnect = False
        for client in clients:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client._disconnect(), 5)
        current = asyncio.current_task()
        leftovers = [t for t in asyncio.all_tasks() if t is not current]
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)
        log.info("feishu_ws_stopped", apps=len(clients))

    def _launch(self, cred_id: str) -> None:
        """Drive the app's current client on this loop; a client it replaces is retired. Runs on lark-ws."""
        if self._stop is None or self._stop.is_set():
            return
        client = self._clients[cred_id]
        running = self._driving.get(cred_id)
        if running is not None and not running.done():
            if self._driven.get(cred_id) is client:
                return
            running.cancel()  # its `_drive` retires the old client on the way out
        self._driven[cred_id] = client
        self._driving[cred_id] = asyncio.get_running_loop().create_task(self._drive(cred_id, client))

    async def _drive(self, cred_id: str, client: Any) -> None:
        """Connect, then watch the connection until it is lost for good; then retire the client and report
        the app failed, so the channel's start retry brings it up again with a new client."""
        try:
            error = await self._first_connect(cred_id, client)
            if error is None:
                log.info("feishu_ws_connected", cred_id=cred_id)
                error = await self._watch(client)
                log.error("feishu_ws_lost", cred_id=cred_id, error=error)
            else:
                log.error("feishu_ws_start_failed", cred_id=cred_id, error=error)
        finally:
            with contextlib.suppress(Exception):
                await client.retire()
            if self._driving.get(cred_id) is asyncio.current_task():
                del self._driving[cred_id]
        self.on_failed(cred_id, error)

    async def _first_connect(self, cred_id: str, client: Any) -> str | None:
        """Connect like the SDK's `start()`; None once connected, else why it gave up."""
        from lark_oapi.ws.exception import ClientException

        try:
            await client._connect()
            return None
        except ClientException as e:  # bad credentials and the like: the SDK would not retry
            return str(e)
        except Exception as e:
            log.warning("feishu_ws_connect_failed", cred_id=cred_id, error=str(e))
        with contextlib.suppress(Exception):
            await client._disconnect()
        try:
            await client._reconnect()
        except Exception as e:
            return str(e)
        return None

    async def _watch(self, client: Any) -> str:
        """Run the app-level ping loop (as `start()` does) until the client is lost: its reconnecting gave up
        (raised out of the SDK's own task), or it has had no connection for `dead_after_s`."""
        pinger = asyncio.get_running_loop().create_task(client._ping_loop())
        dead_after_s = client.dead_after_s
        down_since: float | None = None
        try:
            while True:
                if client.gave_up is not None:
                    return f"reconnect refused: {client.gave_up}"
                if pinger.done():
                    return "ping loop ended"
                now = time.monotonic()
                if client._conn is not None:
                    down_since = None
                elif down_since is None:
                    down_since = now
                elif now - down_since >= dead_after_s:
                    return f"no connection for {now - down_since:.0f} s"
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(client.lost.wait(), min(1.0, dead_after_s / 4))
        finally:
            pinger.cancel()


def _quiet_exception(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    log.debug("feishu_ws_loop_exception", message=str(context.get("message")), error=repr(context.get("exception")))
