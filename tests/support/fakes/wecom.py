"""A fake WeCom: callback crypto built like WeCom's, a `cgi-bin` API server and an AI-bot websocket server."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
import secrets
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web
from aiohttp.test_utils import TestServer
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from agenthub.channel import ChannelContext, WebRoutes
from agenthub.config import Settings
from agenthub.storage.ports import Inbox
from tests.support.fakes.wecom_limits import MemberLimit
from tests.support.fakes.wecom_media import (
    MediaFile,
    MediaStore,
    app_disposition,
    bot_disposition,
    bot_media_encrypt,
    make_media_aeskey,
    wrong_key_for,
)
from tests.support.fakes.wecom_users import Members

# ---------------------------------------------------------------- callback crypto, independent of wechatpy


def make_aes_key() -> str:
    """A valid 43-character EncodingAESKey."""
    return base64.b64encode(os.urandom(32)).decode().rstrip("=")


def wecom_encrypt(plaintext: str, receive_id: str, aes_key: str) -> str:
    key = base64.b64decode(aes_key + "=")
    msg = plaintext.encode()
    raw = os.urandom(16) + struct.pack(">I", len(msg)) + msg + receive_id.encode()
    pad = 32 - len(raw) % 32
    raw += bytes([pad]) * pad
    enc = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
    return base64.b64encode(enc.update(raw) + enc.finalize()).decode()


def wecom_decrypt(ciphertext: str, aes_key: str) -> tuple[str, str]:
    """Return (message, receive_id)."""
    key = base64.b64decode(aes_key + "=")
    dec = Cipher(algorithms.AES(key), modes.CBC(key[:16])).decryptor()
    raw = dec.update(base64.b64decode(ciphertext)) + dec.finalize()
    raw = raw[: -raw[-1]]
    (length,) = struct.unpack(">I", raw[16:20])
    return raw[20 : 20 + length].decode(), raw[20 + length :].decode()


def wecom_signature(token: str, timestamp: str, nonce: str, encrypt: str) -> str:
    return hashlib.sha1("".join(sorted([token, timestamp, nonce, encrypt])).encode()).hexdigest()


def text_message_xml(
    *, corp_id: str, user: str, content: str, msg_id: int, agent_id: int = 1000002, create_time: int = 0
) -> str:
    return (
        f"<xml><ToUserName><![CDATA[{corp_id}]]></ToUserName><FromUserName><![CDATA[{user}]]></FromUserName>"
        f"<CreateTime>{create_time or int(time.time())}</CreateTime><MsgType><![CDATA[text]]></MsgType>"
        f"<Content><![CDATA[{content}]]></Content><MsgId>{msg_id}</MsgId><AgentID>{agent_id}</AgentID></xml>"
    )


def message_xml(corp_id: str, user: str, agent_id: int, fields: dict[str, str | int]) -> str:
    """Any plaintext callback: the common header plus `fields` (MsgType, Event, Recognition, ...)."""
    body = "".join(
        f"<{k}>{v}</{k}>" if isinstance(v, int) else f"<{k}><![CDATA[{v}]]></{k}>" for k, v in fields.items()
    )
    return (
        f"<xml><ToUserName><![CDATA[{corp_id}]]></ToUserName><FromUserName><![CDATA[{user}]]></FromUserName>"
        f"<CreateTime>{int(time.time())}</CreateTime>{body}<AgentID>{agent_id}</AgentID></xml>"
    )


def signed_callback(
    plaintext: str, *, token: str, aes_key: str, corp_id: str, agent_id: int = 1000002, sent_at: float | None = None
) -> tuple[dict[str, str], str]:
    """(query, body) of a POST callback exactly as WeCom sends it (at `sent_at`, default now)."""
    enc = wecom_encrypt(plaintext, corp_id, aes_key)
    ts, nonce = str(int(time.time() if sent_at is None else sent_at)), secrets.token_hex(5)
    query = {"msg_signature": wecom_signature(token, ts, nonce, enc), "timestamp": ts, "nonce": nonce}
    body = (
        f"<xml><ToUserName><![CDATA[{corp_id}]]></ToUserName><AgentID><![CDATA[{agent_id}]]></AgentID>"
        f"<Encrypt><![CDATA[{enc}]]></Encrypt></xml>"
    )
    return query, body


def signed_echo(echo: str, *, token: str, aes_key: str, corp_id: str) -> dict[str, str]:
    """The query of a GET URL verification."""
    enc = wecom_encrypt(echo, corp_id, aes_key)
    ts, nonce = str(int(time.time())), secrets.token_hex(5)
    return {"msg_signature": wecom_signature(token, ts, nonce, enc), "timestamp": ts, "nonce": nonce, "echostr": enc}


# ---------------------------------------------------------------- shared server plumbing


class _Server:
    def __init__(self) -> None:
        self._runner: web.AppRunner | None = None
        self._cond = asyncio.Condition()
        self.port = 0

    async def _serve(self, app: web.Application) -> None:
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _changed(self) -> None:
        async with self._cond:
            self._cond.notify_all()

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout), self._cond:
            await self._cond.wait_for(predicate)


# ---------------------------------------------------------------- cgi-bin API


class FakeQyApi(_Server, MemberLimit):
    """`gettoken` and `message/send`. Records sends; `send_errcodes` queues errcodes for the next sends;
    `expire_tokens()` makes the issued tokens answer 42001 from then on.

    Like WeCom it delivers at most `member_per_minute` / `member_per_hour` messages from one app to one member
    (sliding windows on `clock`) and silently drops the rest: errcode 0, but the body lands in `dropped`.
    """

    def __init__(self, corp_id: str, secret: str) -> None:
        _Server.__init__(self)
        MemberLimit.__init__(self)
        self.corp_id = corp_id
        self.secret = secret
        self.tokens_issued: list[str] = []
        self.expired: set[str] = set()
        self.send_errcodes: list[int] = []
        self.sends: list[dict[str, Any]] = []
        self.attempts: list[tuple[str, dict[str, Any]]] = []
        self.send_times: list[float] = []
        """Loop time at which each successful send arrived."""
        self.send_delay_s = 0.0
        self.dropped: list[dict[str, Any]] = []
        """Sends answered errcode 0 but never delivered: over the per-member limit."""
        self.media = MediaStore()
        """What `media/get` serves, by media_id; an unknown id is answered errcode 40007 like WeCom."""
        self.media_errcodes: list[int] = []
        self.media_tokens: list[str] = []
        """The access token of every `media/get` call."""
        self.token_gate: asyncio.Event | None = None
        """When set, `gettoken` answers only once this event is (a slow start); `token_asked` is set on each wait."""
        self.token_asked = asyncio.Event()
        self.members = Members()
        """What `user/get` answers (读取成员)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> FakeQyApi:
        app = web.Application()
        app.router.add_get("/cgi-bin/gettoken", self._gettoken)
        app.router.add_post("/cgi-bin/message/send", self._send)
        app.router.add_get("/cgi-bin/media/get", self._media_get)
        self.members.mount(app.router, self)
        await self._serve(app)
        return self

    def add_media(self, media_id: str, data: bytes, *, filename: str, content_type: str, chunked: bool = False) -> None:
        """A temporary media file as `media/get` serves it: its bytes, Content-Type and Content-disposition."""
        self.media.put(media_id, MediaFile(data, content_type, app_disposition(filename), chunked))

    async def _media_get(self, request: web.Request) -> web.StreamResponse:
        """Success: the file bytes with its headers; failure: a JSON body with errcode (HTTP 200 either way)."""
        token = request.query.get("access_token", "")
        self.media_tokens.append(token)
        if token not in self.tokens_issued:
            return web.json_response({"errcode": 40014, "errmsg": "invalid access_token"})
        if token in self.expired:
            return web.json_response({"errcode": 42001, "errmsg": "access_token expired"})
        if self.media_errcodes:
            code = self.media_errcodes.pop(0)
            return web.json_response({"errcode": code, "errmsg": f"injected {code}"})
        media_id = request.query.get("media_id", "")
        if media_id not in self.media.files:
            return web.json_response({"errcode": 40007, "errmsg": "invalid media_id"})
        return await self.media.serve(request, media_id)

    def expire_tokens(self) -> None:
        self.expired.update(self.tokens_issued)

    def texts(self) -> list[str]:
        return [m[m["msgtype"]]["content"] for m in self.sends]

    async def _gettoken(self, request: web.Request) -> web.Response:
        if self.token_gate is not None:
            self.token_asked.set()
            await self.token_gate.wait()
        q = request.query
        if q.get("corpid") != self.corp_id:
            return web.json_response({"errcode": 40013, "errmsg": "invalid corpid"})
        if q.get("corpsecret") != self.secret:
            return web.json_response({"errcode": 40001, "errmsg": "invalid credential"})
        token = f"T{len(self.tokens_issued) + 1}-{secrets.token_hex(4)}"
        self.tokens_issued.append(token)
        return web.json_response({"errcode": 0, "errmsg": "ok", "access_token": token, "expires_in": 7200})

    async def _send(self, request: web.Request) -> web.Response:
        token = request.query.get("access_token", "")
        body = json.loads(await request.read())
        self.attempts.append((token, body))
        if self.send_delay_s:
            await asyncio.sleep(self.send_delay_s)
        if token not in self.tokens_issued:
            return web.json_response({"errcode": 40014, "errmsg": "invalid access_token"})
        if token in self.expired:
            return web.json_response({"errcode": 42001, "errmsg": "access_token expired"})
        if self.send_errcodes:
            code = self.send_errcodes.pop(0)
            return web.json_response({"errcode": code, "errmsg": f"injected {code}"})
        if self._over_member_limit(body):
            self.dropped.append(body)
        else:
            self.sends.append(body)
            self.send_times.append(asyncio.get_running_loop().time())
        await self._changed()
        msgid = secrets.token_hex(8)
        return web.json_response({"errcode": 0, "errmsg": "ok", "invaliduser": "", "msgid": msgid})


# ---------------------------------------------------------------- AI bot long connection


NOT_SUBSCRIBED = 846609
_ESCAPED_CONTROL = re.compile(r"(?<!\\)\\(u00[01][0-9a-f]|[rbf])")
_SHORT_ESCAPES = {"r": "\r", "b": "\b", "f": "\f"}


def _raw_control(match: re.Match[str]) -> str:
    """An escaped control character back to the raw one, for those the Node SDK strips; tab and newline stay
    escaped (the SDK's JSON.parse would reject them raw, so WeCom cannot be sending them so)."""
    code = match.group(1)
    char = _SHORT_ESCAPES.get(code) or chr(int(code[1:], 16))
    return match.group(0) if char in "\t\n" else char


class FakeAiBotServer(_Server):
    """The AI-bot websocket endpoint: acks every command, records frames, pushes callbacks on demand.

    Like WeCom it answers 846609 to commands on a connection that is not (or no longer) subscribed, delivers
    callbacks only to a subscribed connection, and when a newer connection subscribes, sends the older ones a
    `disconnected_event` and closes them. Callback bodies carry the fields of the official SDKs' types.
    """

    def __init__(self, bot_id: str, secret: str) -> None:
        super().__init__()
        self.bot_id = bot_id
        self.secret = secret
        self.frames: list[dict[str, Any]] = []
        self.connections = 0
        self.subscribed = 0
        self.ack_errcodes: dict[str, list[int]] = {}
        self.unanswered: set[str] = set()
        """Commands that get no ack at all (a dead or overloaded server)."""
        self.ack_rule: Callable[[dict[str, Any]], int | None] | None = None
        """Picks the errcode for one frame (None: fall back to `ack_errcodes`)."""
        self.drop_on: Callable[[dict[str, Any]], bool] | None = None
        """Frames that make the server close the connection instead of acking them (lost mid-command)."""
        self.drop_after_subscribe = 0
        """Close this many of the next connections right after acking their subscribe (a flapping server)."""
        self.connect_times: list[float] = []
        """Loop time at which each connection was accepted."""
        self.frame_connections: list[int] = []
        """For each entry of `frames`, the number (1-based) of the connection it arrived on."""
        self.drop_ack: Callable[[dict[str, Any]], bool] | None = None
        """Frames whose ack is never sent (processed, but the ack is lost on the way)."""
        self.ack_delay_s: dict[str, float] = {}
        """Per command, how long its ack takes (the connection reads nothing else meanwhile)."""
        self.ack_cmd: str | None = None
        """When set, acks carry this `cmd` (the SDKs' `WsFrame`: "cmd ... may be empty" on acks)."""
        self.overlaps = 0
        """Subscribes that came while another connection of the bot was subscribed (each one kicks it out)."""
        self._ws: web.WebSocketResponse | None = None
        self._current = 0  # the number of the connection `_ws` is
        self._live: set[int] = set()  # connections that are subscribed now
        self._sockets: dict[int, web.WebSocketResponse] = {}  # every open connection by number
        self.media = MediaStore()
        """What the media urls in callbacks serve (encrypted); an unknown or expired url is a 404."""

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    @property
    def live(self) -> int:
        """How many connections are subscribed now."""
        return len(self._live)

    async def start(self) -> FakeAiBotServer:
        app = web.Application()
        app.router.add_get("/", self._handle)
        app.router.add_get("/media/{key}", self._media)
        await self._serve(app)
        return self

    def add_media(
        self, data: bytes, *, filename: str = "", aeskey: str | None = None, chunked: bool = False
    ) -> dict[str, str]:
        """Serve `data` encrypted under a fresh per-message key; return the callback's `{"url", "aeskey"}`.

        `aeskey` given: the bytes are encrypted under that key instead (a callback can then carry another one)."""
        key = aeskey or make_media_aeskey()
        name = secrets.token_hex(8)
        disposition = bot_disposition(filename) if filename else "attachment"
        self.media.put(name, MediaFile(bot_media_encrypt(data, key), "application/octet-stream", disposition, chunked))
        return {"url": f"http://127.0.0.1:{self.port}/media/{name}", "aeskey": key}

    def with_wrong_key(self, media: dict[str, str]) -> dict[str, str]:
        """`media` (from `add_media`) carrying another message's aeskey, under which its bytes do not decrypt."""
        served = self.media.files[media["url"].rsplit("/", 1)[-1]]
        return {**media, "aeskey": wrong_key_for(served.data)}

    async def _media(self, request: web.Request) -> web.StreamResponse:
        key = request.match_info["key"]
        if key not in self.media.files:
            return web.Response(status=404, text="not found")
        return await self.media.serve(request, key)

    def sent(self, cmd: str, req_id: str | None = None) -> list[dict[str, Any]]:
        return [f for f in self.frames if f.get("cmd") == cmd and (req_id is None or f["headers"]["req_id"] == req_id)]

    async def push(self, frame: dict[str, Any], *, raw_controls: bool = False, binary: bool = False) -> None:
        """Deliver a callback on the current connection once it is subscribed (WeCom sends none before).

        `raw_controls`: the control characters the Node SDK strips go out raw, as WeCom sends them in user text,
        not JSON-escaped. `binary`: as a binary websocket frame (both official SDKs parse those too)."""
        text = json.dumps(frame, ensure_ascii=False)
        if raw_controls:
            text = _ESCAPED_CONTROL.sub(_raw_control, text)
        await self.push_text(text, binary=binary)

    async def push_text(self, text: str, *, binary: bool = False) -> None:
        """Put `text` on the current subscribed connection as it is."""
        await self.wait_for(lambda: self._ws is not None and self._current in self._live)
        assert self._ws is not None
        if binary:
            await self._ws.send_bytes(text.encode())
        else:
            await self._ws.send_str(text)

    async def send_message(self, body: dict[str, Any], **wire: bool) -> str:
        """A message callback; `wire` is passed to `push`."""
        req_id = f"cb_{secrets.token_hex(6)}"
        await self.push({"cmd": "aibot_msg_callback", "headers": {"req_id": req_id}, "body": body}, **wire)
        return req_id

    def unsubscribe(self) -> None:
        """Drop the current connection's subscription server-side; the socket stays open and every command on
        it is answered 846609 from now on."""
        self._live.discard(self._current)

    async def send_event(self, eventtype: str, **extra: Any) -> str:
        """An event callback; `extra` overrides body fields (e.g. `msgid`, `from`)."""
        req_id = f"ev_{secrets.token_hex(6)}"
        await self.push(
            {"cmd": "aibot_event_callback", "headers": {"req_id": req_id}, "body": self.event_body(eventtype, **extra)}
        )
        return req_id

    def event_body(self, eventtype: str, **extra: Any) -> dict[str, Any]:
        """An event callback's body as the SDKs type it (`EventMessage`); `chatid`/`chattype` only when given."""
        body = {
            "msgid": secrets.token_hex(8),
            "create_time": int(time.time()),
            "aibotid": self.bot_id,
            "from": {"userid": "zhangsan"},
            "msgtype": "event",
            "event": {"eventtype": eventtype},
        }
        return {**body, **extra}

    def sent_on(self, connection: int, cmd: str) -> list[dict[str, Any]]:
        """The frames of `cmd` that arrived on the given connection (1-based)."""
        pairs = zip(self.frames, self.frame_connections, strict=True)
        return [f for f, n in pairs if n == connection and f.get("cmd") == cmd]

    def streams(self, req_id: str) -> list[dict[str, Any]]:
        """The `stream` bodies sent in answer to one callback, in order."""
        return [f["body"]["stream"] for f in self.sent("aibot_respond_msg", req_id)]

    def text_body(self, content: str, *, msgid: str, user: str = "zhangsan", **extra: Any) -> dict[str, Any]:
        """A text message callback's body as the SDKs type it (`TextMessage`); `extra` overrides fields."""
        body: dict[str, Any] = {"msgid": msgid, "aibotid": self.bot_id, "chattype": "single", "from": {"userid": user}}
        body["create_time"] = int(time.time())
        return {**body, "msgtype": "text", "text": {"content": content}, **extra}

    async def drop(self) -> None:
        """Close the current connection as a network failure would."""
        ws, self._ws = self._ws, None
        if ws is not None:
            await ws.close()

    async def _handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.connections += 1
        number = self.connections
        self.connect_times.append(asyncio.get_running_loop().time())
        self._ws, self._current = ws, number
        self._sockets[number] = ws
        await self._changed()
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            frame = json.loads(msg.data)
            self.frames.append(frame)
            self.frame_connections.append(number)
            if self.drop_on is not None and self.drop_on(frame):
                await ws.close()
            else:
                authed = await self._answer(ws, frame, number in self._live)
                if authed and frame.get("cmd") == "aibot_subscribe":
                    self.overlaps += bool(self._live - {number})
                    await self._disconnect_older(number)
                if authed:
                    self._live.add(number)
                if authed and frame.get("cmd") == "aibot_subscribe" and self.drop_after_subscribe > 0:
                    self.drop_after_subscribe -= 1
                    await ws.close()
            await self._changed()
        self._live.discard(number)
        self._sockets.pop(number, None)
        if self._ws is ws:
            self._ws = None
        return ws

    async def _disconnect_older(self, newer: int) -> None:
        """A newer connection subscribed: every older subscribed one gets `disconnected_event`, then is closed."""
        for number in sorted(self._live - {newer}):
            self._live.discard(number)
            ws = self._sockets.get(number)
            if ws is None or ws.closed:
                continue
            body = self.event_body("disconnected_event", **{"from": {"userid": ""}})  # WeCom's value: unknown
            frame = {"cmd": "aibot_event_callback", "headers": {"req_id": f"ev_{secrets.token_hex(6)}"}, "body": body}
            await ws.send_str(json.dumps(frame, ensure_ascii=False))
            await ws.close()

    async def _answer(self, ws: web.WebSocketResponse, frame: dict[str, Any], authed: bool) -> bool:
        cmd = frame.get("cmd", "")
        if cmd in self.unanswered:
            return authed
        ruled = self.ack_rule(frame) if self.ack_rule is not None else None
        queued = self.ack_errcodes.get(cmd)
        code = ruled if ruled is not None else (queued.pop(0) if queued else 0)
        if cmd == "aibot_subscribe":
            body = frame.get("body", {})
            ok = body.get("bot_id") == self.bot_id and body.get("secret") == self.secret
            code = code or (0 if ok else 40001)
            authed = code == 0
            if authed:
                self.subscribed += 1
        elif not authed:
            code = NOT_SUBSCRIBED
        if self.drop_ack is not None and self.drop_ack(frame):
            return authed
        errmsg = "ok" if not code else ("aibot websocket not subscribed" if code == NOT_SUBSCRIBED else "err")
        reply: dict[str, Any] = {"headers": {"req_id": frame["headers"]["req_id"]}, "errcode": code, "errmsg": errmsg}
        if self.ack_cmd is not None:
            reply = {"cmd": self.ack_cmd, **reply}
        if self.ack_delay_s.get(cmd):
            await asyncio.sleep(self.ack_delay_s[cmd])
        await ws.send_str(json.dumps(reply))
        return authed


# ---------------------------------------------------------------- channel harness


def channel_context(
    gateway: Any, state_dir: Path, settings: Settings | None = None, inbox: Inbox | None = None
) -> ChannelContext:
    """A ChannelContext for channel tests: the given gateway, default settings, fresh route table, and `inbox`
    (else one in memory)."""
    context = ChannelContext(gateway=gateway, settings=settings or Settings(), web=WebRoutes(), state_dir=state_dir)
    if inbox is not None:
        context.inbox = inbox
    return context


async def serve_routes(context: ChannelContext) -> TestServer:
    """Mount the channel's routes on a real loopback HTTP server, as the daemon does."""
    app = web.Application()
    app.add_routes(context.web.routes)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server
