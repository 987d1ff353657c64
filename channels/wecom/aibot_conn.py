"""The AI bot's long connection: subscribe, ping, acks by req_id, reconnect with backoff, yield to a newer instance."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import structlog

from agenthub import jsonsafe
from agenthub.errors import ChannelSendError
from channels.toolkit.order import KeyedLock
from channels.wecom.config import BotConfig

log = structlog.get_logger(__name__)

FrameHandler = Callable[[dict[str, Any]], Awaitable[None]]

BOT_ERRCODE_HINTS: dict[int, str] = {
    6000: "command conflict; retried",
    40008: "invalid message type for this command (plain text replies are not allowed; use stream)",
    600039: "stream messages are not supported on this client",
    846608: "stream message update expired (no update for ~6 minutes); continuing with a new message",
    846609: "the subscription is gone (WeCom unsubscribed this connection); reconnecting and resubscribing",
}
NOT_SUBSCRIBED = 846609  # on any ack: the server dropped this connection's subscription
CALLBACK_CMDS = frozenset({"aibot_msg_callback", "aibot_event_callback"})  # frames WeCom sends unasked
CONFLICT_RETRIES = 3
RESEND_RETRIES = 2  # how many reconnections one command may wait for after losing its connection
# WeCom puts some control characters raw into user text, which is not JSON; the official Node SDK strips these
# before parsing (tab and newline stay; raw ones inside strings are accepted by the non-strict parser)
RAW_CONTROL_CHARS = re.compile("[\x00-\x08\x0b-\x0d\x0e-\x1f]")


def bot_errcode_hint(errcode: int) -> str:
    return BOT_ERRCODE_HINTS.get(errcode, "see https://developer.work.weixin.qq.com/document/path/101463")


class BotApiError(ChannelSendError):
    """WeCom acked a command with a non-zero errcode."""

    def __init__(self, cmd: str, errcode: int, errmsg: str) -> None:
        self.errcode = errcode
        super().__init__(f"wecom {cmd} failed: errcode {errcode} ({errmsg}); {bot_errcode_hint(errcode)}")


class AckTimeout(ChannelSendError):
    """No ack arrived within `ack_timeout_s`: the frame may or may not have reached WeCom."""


class ConnectionLost(ChannelSendError):
    """The connection went away under a command; `sent` says whether the frame may have reached WeCom."""

    def __init__(self, message: str, *, sent: bool) -> None:
        self.sent = sent
        super().__init__(message)


def new_req_id(prefix: str) -> str:
    return f"{prefix}_{int(time.time() * 1000)}_{secrets.token_hex(4)}"


class BotConnection:
    """Exactly one websocket per bot. Commands are sent with `request()`, which waits for the matching ack;
    commands sharing a req_id are sent one at a time. Frames with a `cmd` go to `on_frame`."""

    def __init__(
        self,
        cred_id: str,
        config: BotConfig,
        on_frame: FrameHandler,
        session: aiohttp.ClientSession,
    ) -> None:
        self.cred_id = cred_id
        self._cfg = config
        self._on_frame = on_frame
        self._session = session
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._connected = asyncio.Event()
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._req_locks = KeyedLock()
        self._task: asyncio.Task[None] | None = None
        self.replaced = False
        self.connects = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if self._task is None:
            self.replaced = False  # started again (the lease came back): a new connection
            self._task = asyncio.create_task(self._run(), name=f"wecom-bot-{self.cred_id}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def wait_finished(self) -> None:
        """Return when the connection loop ended for good (replaced by another instance, or stopped)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def _run(self) -> None:
        backoff = self._cfg.reconnect_min_s
        while True:
            uptime: float | None = None
            try:
                uptime = await self._connect_once()
            except (aiohttp.ClientError, TimeoutError, OSError, ChannelSendError) as e:
                log.warning("wecom_bot_connection_failed", cred_id=self.cred_id, error=type(e).__name__)
            except Exception:
                log.exception("wecom_bot_connection_crashed", cred_id=self.cred_id)
            finally:
                self._drop_connection()
            if self.replaced:
                log.warning("wecom_bot_replaced", cred_id=self.cred_id, hint="newer connection took over")
                return
            # A subscribe ack alone proves little: a server that acks and then drops at once would otherwise
            # be re-dialled at the minimum delay forever. Only a connection that stayed up resets the backoff.
            stable = uptime is not None and uptime >= self._cfg.reconnect_stable_s
            backoff = self._cfg.reconnect_min_s if stable else min(backoff * 2, self._cfg.reconnect_max_s)
            delay = backoff + random.uniform(0, backoff / 4)
            up_s = None if uptime is None else round(uptime, 2)
            log.info("wecom_bot_reconnecting", cred_id=self.cred_id, delay_s=round(delay, 2), uptime_s=up_s)
            await asyncio.sleep(delay)

    async def _connect_once(self) -> float | None:
        """One connection's life; how long it stayed up after a successful subscribe (None: never subscribed)."""
        async with asyncio.timeout(self._cfg.connect_timeout_s):
            ws = await self._session.ws_connect(self._cfg.ws_url, heartbeat=None, max_msg_size=0)
        self.connects += 1
        reader = asyncio.create_task(self._read(ws))
        pinger: asyncio.Task[None] | None = None
        loop = asyncio.get_running_loop()
        try:
            if not await self._subscribe(ws):
                return None
            self._mark_up(ws)
            since = loop.time()
            log.info("wecom_bot_connected", cred_id=self.cred_id, connects=self.connects)
            pinger = asyncio.create_task(self._ping(ws))
            await asyncio.wait({reader, pinger}, return_when=asyncio.FIRST_COMPLETED)
            return loop.time() - since
        finally:
            self._mark_down(ws)  # at once: sends from now on wait for the next connection
            for task in (reader, pinger):
                if task is not None:
                    task.cancel()
            await asyncio.gather(*(t for t in (reader, pinger) if t is not None), return_exceptions=True)
            await ws.close()

    def _mark_up(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._connected.set()

    def _mark_down(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        """`_ws` and `_connected` change together, so a send never sees one without the other."""
        if self._ws is ws:
            self._ws = None
            self._connected.clear()

    def _drop_connection(self) -> None:
        self._connected.clear()
        self._ws = None
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionLost("wecom bot connection lost", sent=True))
        self._pending.clear()

    async def _subscribe(self, ws: aiohttp.ClientWebSocketResponse) -> bool:
        # the official SDKs' body; no `device_id`: no WeCom source reads one (a peer's guess, see wecom.md §5.2)
        body = {"bot_id": self._cfg.bot_id, "secret": self._cfg.secret.get_secret_value()}
        frame = {"cmd": "aibot_subscribe", "headers": {"req_id": new_req_id("aibot_subscribe")}, "body": body}
        ack = await self._exchange(ws, frame)
        errcode = int(ack.get("errcode", 0))
        if errcode != 0:
            log.error(
                "wecom_bot_subscribe_failed",
                cred_id=self.cred_id,
                errcode=errcode,
                errmsg=str(ack.get("errmsg", ""))[:200],
                hint="check bot_id and secret",
            )
            return False
        return True

    async def _ping(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        """Return when the connection is dead: two missed acks, or an ack saying the subscription is gone.

        As in the official SDKs, a ping goes out every `ping_interval_s`, its ack may come any time before the
        next one is due, and only an ack with errcode 0 counts as an answer."""
        loop = asyncio.get_running_loop()
        interval = self._cfg.ping_interval_s
        due = loop.time() + interval
        missed = 0
        while missed < 2:
            await asyncio.sleep(max(0.0, due - loop.time()))
            due = max(due, loop.time()) + interval  # a late wake-up (a busy loop) still leaves a whole interval
            ping = {"cmd": "ping", "headers": {"req_id": new_req_id("ping")}}
            try:
                ack = await self._exchange(ws, ping, timeout_s=max(0.0, due - loop.time()))
                errcode: int | None = _errcode(ack)
            except (ChannelSendError, TimeoutError):
                errcode = None
            if errcode == NOT_SUBSCRIBED:
                return  # the reader has closed the socket already; the loop resubscribes
            if errcode != 0:
                missed += 1
                log.warning("wecom_bot_ping_missed", cred_id=self.cred_id, missed=missed, errcode=errcode)
                continue
            missed = 0
        log.warning("wecom_bot_connection_dead", cred_id=self.cred_id)

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        async for msg in ws:
            if msg.type not in (aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY):
                continue
            try:
                frame = parse_frame(msg.data)
                req_id = str(frame["headers"]["req_id"])
            except (ValueError, KeyError, TypeError):
                log.warning("wecom_bot_bad_frame", cred_id=self.cred_id, size=len(msg.data))
                continue
            if frame.get("cmd") not in CALLBACK_CMDS:
                # as in the official SDKs: whatever is not a callback is an ack (its cmd absent, empty or not)
                future = self._pending.pop(req_id, None)
                if future is not None and not future.done():
                    future.set_result(frame)
                elif future is None:
                    log.info("wecom_bot_frame_ignored", cred_id=self.cred_id, cmd=frame.get("cmd"), req_id=req_id)
                if _errcode(frame) == NOT_SUBSCRIBED:
                    # a live socket whose subscription is gone stays silent forever: drop it, resubscribe
                    log.warning("wecom_bot_unsubscribed", cred_id=self.cred_id, hint=bot_errcode_hint(NOT_SUBSCRIBED))
                    await ws.close()
                    return
            elif _is_disconnected_event(frame):
                self.replaced = True
                await ws.close()
                return
            else:
                await self._on_frame(frame)

    # ------------------------------------------------------------------ commands

    async def _exchange(
        self, ws: aiohttp.ClientWebSocketResponse, frame: dict[str, Any], *, timeout_s: float | None = None
    ) -> dict[str, Any]:
        """Send `frame` and wait for its ack, up to `timeout_s` (default `ack_timeout_s`)."""
        req_id = frame["headers"]["req_id"]
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = future
        try:
            async with asyncio.timeout(self._cfg.ack_timeout_s if timeout_s is None else timeout_s):
                try:
                    await ws.send_str(json.dumps(frame, ensure_ascii=False))
                except (ConnectionError, aiohttp.ClientError) as e:
                    # the transport refused the frame: it never left, so sending it again is always safe
                    raise ConnectionLost(f"wecom bot send failed: {type(e).__name__}", sent=False) from None
                return await future
        finally:
            if self._pending.get(req_id) is future:
                del self._pending[req_id]

    async def request(
        self, cmd: str, body: dict[str, Any], req_id: str | None = None, *, idempotent: bool = False
    ) -> dict[str, Any]:
        """Send a command and return its ack; raise `BotApiError` on a non-zero errcode, `AckTimeout` when no ack
        came within `ack_timeout_s`, `ChannelSendError` when there is no connection within `send_wait_s`.

        When the connection is lost under the command, a frame that never left is sent again on the next
        connection; one that may have reached WeCom is sent again only when `idempotent` (a stream frame
        carrying the full text so far), otherwise the loss is logged and raised rather than risk a duplicate.
        A frame refused with 846609 (not subscribed) was not processed: it is sent again after resubscribing.
        """
        req_id = req_id or new_req_id(cmd)
        frame = {"cmd": cmd, "headers": {"req_id": req_id}, "body": body}
        conflicts = resends = 0
        async with self._req_lock(req_id):
            while True:
                ws = await self._wait_connected()
                try:
                    ack = await self._exchange(ws, frame)
                except TimeoutError:
                    raise AckTimeout(f"wecom {cmd}: no ack within {self._cfg.ack_timeout_s}s") from None
                except ConnectionLost as e:
                    self._mark_down(ws)  # dead for sending, even if the reader has not noticed yet
                    if resends < RESEND_RETRIES and (idempotent or not e.sent):
                        resends += 1
                        log.info("wecom_bot_resend_after_reconnect", cred_id=self.cred_id, cmd=cmd, req_id=req_id)
                        continue
                    raise self._lost(cmd, req_id, e) from None
                errcode = _errcode(ack)
                if errcode == NOT_SUBSCRIBED and resends < RESEND_RETRIES:
                    # WeCom refused the frame unprocessed, so it is safe to send again once resubscribed
                    self._mark_down(ws)
                    resends += 1
                    log.info("wecom_bot_resend_after_resubscribe", cred_id=self.cred_id, cmd=cmd, req_id=req_id)
                    continue
                if errcode == 6000 and conflicts < CONFLICT_RETRIES:
                    conflicts += 1
                    await asyncio.sleep(0.2 * conflicts)
                    continue
                if errcode != 0:
                    raise BotApiError(cmd, errcode, str(ack.get("errmsg", ""))[:200])
                return ack

    def _lost(self, cmd: str, req_id: str, error: ConnectionLost) -> ChannelSendError:
        if not error.sent:
            return ChannelSendError(f"wecom {cmd}: {error}")
        log.warning(
            "wecom_bot_send_outcome_unknown",
            cred_id=self.cred_id,
            cmd=cmd,
            req_id=req_id,
            hint="the connection dropped before the ack; not resent, to avoid a duplicate",
        )
        return ChannelSendError(f"wecom {cmd}: connection lost before the ack; it may or may not have been delivered")

    async def _wait_connected(self) -> aiohttp.ClientWebSocketResponse:
        """The live websocket, waiting up to `send_wait_s` for a (re)connection."""
        try:
            async with asyncio.timeout(self._cfg.send_wait_s):
                while True:
                    if self.replaced:
                        raise ChannelSendError("wecom bot connection was taken over by another instance")
                    await self._connected.wait()
                    ws = self._ws
                    if ws is not None and not ws.closed:
                        return ws
                    self._ws = None  # closed under us before the connection loop noticed: wait for the next
                    self._connected.clear()
        except TimeoutError:
            raise ChannelSendError("wecom bot is not connected") from None

    @contextlib.asynccontextmanager
    async def _req_lock(self, req_id: str) -> AsyncIterator[None]:
        async with self._req_locks.hold(req_id):
            yield


def parse_frame(data: str | bytes) -> dict[str, Any]:
    """One websocket frame as the official SDKs read it (UTF-8 text or binary, raw control characters dropped);
    raise ValueError (not UTF-8, not JSON, nested too deep: `jsonsafe`) or TypeError when it is not a JSON object."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    frame = jsonsafe.loads(RAW_CONTROL_CHARS.sub("", text), strict=False)
    if not isinstance(frame, dict):
        raise TypeError("frame is not a JSON object")
    return frame


def _errcode(frame: dict[str, Any]) -> int:
    try:
        return int(frame.get("errcode", 0))
    except (TypeError, ValueError):
        return -1


def _is_disconnected_event(frame: dict[str, Any]) -> bool:
    if frame.get("cmd") != "aibot_event_callback":
        return False
    event = (frame.get("body") or {}).get("event") or {}
    return isinstance(event, dict) and event.get("eventtype") == "disconnected_event"
