"""A fake Feishu open platform on 127.0.0.1: open-apis (auth, im, CardKit, bot info) and the long-connection
endpoint speaking lark's protobuf frames; payloads encrypted and signed as Feishu does are in feishu_payloads."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import WSMsgType, web
from aiohttp.test_utils import TestServer

from tests.support.fakes.feishu_cards import (
    FakeCard,
    card_refusal,
    message_limit_error,
    parse_full_update,
    with_content,
)
from tests.support.fakes.feishu_contacts import Contacts
from tests.support.fakes.feishu_harness import Harness, StoppableSubmitter, running_channel
from tests.support.fakes.feishu_history import MessageHistory
from tests.support.fakes.feishu_payloads import (
    compact_json,
    feishu_body,
    feishu_encrypt,
    feishu_headers,
    mention,
    message_event,
    other_event,
    ws_frame,
)
from tests.support.fakes.feishu_resources import MessageResources

__all__ = ["FakeCard", "FakeFeishu", "Harness", "StoppableSubmitter", "bot_open_id", "running_channel"]
__all__ += ["feishu_body", "feishu_encrypt", "feishu_headers", "mention", "message_event", "other_event"]

# --- the fake platform -------------------------------------------------------------------------------


@dataclass
class SentMessage:
    op: str
    target: str
    msg_type: str
    content: dict[str, Any]
    uuid: str
    message_id: str
    at: float


def bot_open_id(app_id: str) -> str:
    return f"ou_bot_{app_id}"


class FakeFeishu:
    """Serves open-apis and the WS endpoint for the apps in `apps` (app_id → secret); records everything."""

    def __init__(self, apps: dict[str, str], *, latency_s: float = 0.0) -> None:
        self.apps = dict(apps)
        self.latency_s = latency_s
        self.cardkit_denied = False
        self.rate_limit: dict[str, int] = {}
        self.rate_limited: list[str] = []
        self.fail_ops: dict[str, int] = {}
        self.fail_code: dict[str, int] = {}  # the code of a `fail_ops` failure (default 230001, invalid content)
        self.rate_limit_reset = "0.05"  # `x-ogw-ratelimit-reset` (seconds) of a `rate_limit` refusal
        self.refuse_endpoint: dict[str, int] = {}  # app_id -> WS endpoint requests to refuse (exceed conn limit)
        self.unavailable = 0
        """The next this many requests, to any path, are refused with an HTML 503 (Feishu down)."""
        self.refused: list[str] = []
        self.tokens: dict[str, str] = {}
        self.token_fetches: dict[str, int] = {}
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.messages: list[SentMessage] = []
        self.reactions: list[tuple[str, str]] = []
        self.cards: dict[str, FakeCard] = {}
        self.history = MessageHistory()  # GET /open-apis/im/v1/messages/{message_id}
        self.resources = MessageResources()  # GET …/messages/{message_id}/resources/{file_key}
        self.contacts = Contacts()  # GET /open-apis/contact/v3/users/{user_id}
        self.sequence_errors: list[str] = []
        self.ws: dict[str, web.WebSocketResponse] = {}
        self.ws_connected = asyncio.Event()
        self.ws_closed = asyncio.Event()
        self.ws_pings = 0
        self.pings: dict[str, int] = {}
        self.card_update_cap: tuple[int, float] | None = None
        """CardKit's app-wide quota on card updates, `(calls, window_s)`; beyond it a 429 / 99991400."""
        self.card_update_times: dict[str, list[float]] = {}
        self.hang_endpoint: set[str] = set()
        """App ids whose long-connection endpoint request is held open (never answered) while listed."""
        self.endpoint_requests: list[str] = []
        self.endpoint_hanging: set[str] = set()
        self._unhang = asyncio.Event()
        self._closed = False
        self._acks: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._by_uuid: dict[str, SentMessage] = {}
        self._n = itertools.count(1)
        self.server: TestServer | None = None
        self._changed = asyncio.Event()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.port}"

    async def __aenter__(self) -> FakeFeishu:
        app = web.Application(middlewares=[self._notify])
        r = app.router
        r.add_post("/open-apis/auth/v3/tenant_access_token/internal", self._token)
        r.add_get("/open-apis/bot/v3/info", self._bot_info)
        r.add_post("/open-apis/im/v1/messages", self._create)
        r.add_post("/open-apis/im/v1/messages/{message_id}/reply", self._reply)
        self.history.mount(r, self)
        self.resources.mount(r, self)
        self.contacts.mount(r, self)
        r.add_post("/open-apis/im/v1/messages/{message_id}/reactions", self._reaction)
        r.add_post("/open-apis/cardkit/v1/cards", self._card_create)
        r.add_put("/open-apis/cardkit/v1/cards/{card_id}/elements/{element_id}/content", self._card_content)
        r.add_patch("/open-apis/cardkit/v1/cards/{card_id}/settings", self._card_settings)
        r.add_put("/open-apis/cardkit/v1/cards/{card_id}", self._card_update)
        r.add_post("/callback/ws/endpoint", self._ws_endpoint)
        r.add_get("/ws", self._ws)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closed = True
        self._unhang.set()
        for ws in list(self.ws.values()):
            await ws.close()
        assert self.server is not None
        await self.server.close()

    # --- helpers for tests --------------------------------------------------------------------------

    @web.middleware
    async def _notify(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            if self.unavailable > 0:  # an outage: the gateway answers before any open-api sees the request
                self.unavailable -= 1
                self.refused.append(request.path)
                return web.Response(status=503, text="<html>503 Service Temporarily Unavailable</html>")
            return await handler(request)  # type: ignore[no-any-return]
        finally:
            self._changed.set()

    async def wait_until(self, check: Any, timeout: float = 5.0) -> None:
        """Wait until `check()` is true: checked after each request the fake serves, and every 50 ms."""
        async with asyncio.timeout(timeout):
            while not check():
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), 0.05)

    def release_endpoint(self, app_id: str) -> None:
        """Answer the app's held endpoint request (and later ones) normally again."""
        self.hang_endpoint.discard(app_id)
        self._unhang.set()
        self._unhang = asyncio.Event()

    def closed_cards(self) -> int:
        return sum(1 for c in self.cards.values() if not c.streaming)

    def replies(self, op: str = "reply") -> list[SentMessage]:
        return [m for m in self.messages if m.op == op]

    def card_for_reply(self, message_id: str) -> FakeCard:
        sent = [m for m in self.messages if m.target == message_id and m.msg_type == "interactive"]
        assert len(sent) == 1, f"expected one card reply to {message_id}, got {len(sent)}"
        return self.cards[sent[0].content["data"]["card_id"]]

    # --- open-apis ------------------------------------------------------------------------------------

    async def _token(self, request: web.Request) -> web.Response:
        body = await request.json()
        app_id = body.get("app_id", "")
        if not app_id or self.apps.get(app_id) != body.get("app_secret"):
            return web.json_response({"code": 10014, "msg": "app secret invalid"}, status=400)
        self.token_fetches[app_id] = self.token_fetches.get(app_id, 0) + 1
        token = f"t-{app_id}-{next(self._n)}"
        self.tokens[token] = app_id
        return web.json_response({"code": 0, "msg": "ok", "tenant_access_token": token, "expire": 7200})

    async def _enter(self, request: web.Request, op: str) -> tuple[str, dict[str, Any]] | web.Response:
        """Latency, auth and the injected failures shared by every authenticated call."""
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        auth = request.headers.get("Authorization", "")
        app_id = self.tokens.get(auth.removeprefix("Bearer "))
        if app_id is None:
            return web.json_response({"code": 99991663, "msg": "Invalid access token"}, status=400)
        body = await request.json() if request.can_read_body else {}
        self.calls.append((op, request.path, body))
        if self.rate_limit.get(op, 0) > 0:
            self.rate_limit[op] -= 1
            self.rate_limited.append(op)
            headers = {"x-ogw-ratelimit-reset": self.rate_limit_reset}
            return web.json_response({"code": 99991400, "msg": "rate limited"}, status=429, headers=headers)
        if self.fail_ops.get(op, 0) > 0:
            self.fail_ops[op] -= 1
            code = self.fail_code.get(op, 230001)
            return web.json_response({"code": code, "msg": f"injected failure {code}"}, status=400)
        return app_id, body

    async def _bot_info(self, request: web.Request) -> web.Response:
        entered = await self._enter(request, "bot_info")
        if isinstance(entered, web.Response):
            return entered
        app_id, _ = entered
        return web.json_response({"code": 0, "msg": "ok", "bot": {"app_name": "Bot", "open_id": bot_open_id(app_id)}})

    async def _send(self, request: web.Request, op: str, target: str) -> web.Response:
        entered = await self._enter(request, op)
        if isinstance(entered, web.Response):
            return entered
        _, body = entered
        uuid = body.get("uuid", "")
        if uuid and uuid in self._by_uuid:  # Feishu's idempotency: same uuid, same message
            return web.json_response({"code": 0, "data": {"message_id": self._by_uuid[uuid].message_id}})
        content = json.loads(body["content"])
        if body["msg_type"] == "interactive" and "card_id" in content:
            return web.json_response({"code": 200621, "msg": "parse card json err"}, status=400)
        card_ref = content.get("data", {}).get("card_id") if content.get("type") == "card" else None
        if body["msg_type"] == "interactive" and card_ref is not None and card_ref not in self.cards:
            return web.json_response({"code": 230099, "msg": "card not found"}, status=400)
        refused = message_limit_error(body["msg_type"], body["content"]) if card_ref is None else None
        if refused is not None:
            return web.json_response({"code": refused[0], "msg": refused[1]}, status=400)
        sent = SentMessage(op, target, body["msg_type"], content, uuid, f"om_bot_{next(self._n)}", time.monotonic())
        self.messages.append(sent)
        if uuid:
            self._by_uuid[uuid] = sent
        return web.json_response({"code": 0, "msg": "success", "data": {"message_id": sent.message_id}})

    async def _create(self, request: web.Request) -> web.Response:
        return await self._send(request, "create", request.query.get("receive_id_type", "") + ":")

    async def _reply(self, request: web.Request) -> web.Response:
        return await self._send(request, "reply", request.match_info["message_id"])

    async def _reaction(self, request: web.Request) -> web.Response:
        entered = await self._enter(request, "reaction")
        if isinstance(entered, web.Response):
            return entered
        emoji = entered[1]["reaction_type"]["emoji_type"]
        self.reactions.append((request.match_info["message_id"], emoji))
        return web.json_response({"code": 0, "data": {"reaction_id": f"r{next(self._n)}"}})

    async def _card_create(self, request: web.Request) -> web.Response:
        entered = await self._enter(request, "card_create")
        if isinstance(entered, web.Response):
            return entered
        if self.cardkit_denied:
            msg = "Access denied. One of the following scopes is required: [cardkit:card:write]"
            return web.json_response({"code": 99991672, "msg": msg}, status=400)
        body = entered[1]
        assert body["type"] == "card_json"
        card = json.loads(body["data"])
        refused = card_refusal(card)
        if refused is not None:
            return refused
        element = card["body"]["elements"][0]
        card_id = f"card_{next(self._n)}"
        self.cards[card_id] = FakeCard(
            card_id, card, element["content"], bool(card["config"]["streaming_mode"]), created_at=time.monotonic()
        )
        return web.json_response({"code": 0, "data": {"card_id": card_id}})

    async def _enter_card(self, request: web.Request, op: str) -> tuple[FakeCard, dict[str, Any]] | web.Response:
        """`_enter`, then the app-wide card quota, then the `{card_id}` lookup (300300 when unknown)."""
        entered = await self._enter(request, op)
        if isinstance(entered, web.Response):
            return entered
        over_quota = self._card_quota(entered[0])
        if over_quota is not None:
            return over_quota
        card = self.cards.get(request.match_info["card_id"])
        if card is None:
            return web.json_response({"code": 300300, "msg": "card not found"}, status=400)
        return card, entered[1]

    def _card_quota(self, app_id: str) -> web.Response | None:
        """Every card update counts against the app-wide quota, refused ones included, as on Feishu."""
        now = time.monotonic()
        times = self.card_update_times.setdefault(app_id, [])
        times.append(now)
        if self.card_update_cap is None:
            return None
        calls, window_s = self.card_update_cap
        if sum(1 for t in times if t > now - window_s) <= calls:
            return None
        self.rate_limited.append("card_quota")
        body = {"code": 99991400, "msg": "request trigger frequency limit"}
        return web.json_response(body, status=429, headers={"x-ogw-ratelimit-reset": "1"})

    def _sequence(self, card: FakeCard, seq: int) -> web.Response | None:
        if card.sequences and seq <= card.sequences[-1]:
            self.sequence_errors.append(f"{card.card_id}: {seq} after {card.sequences[-1]}")
            return web.json_response({"code": 300317, "msg": "sequence number compare failed"}, status=400)
        card.sequences.append(seq)
        return None

    async def _card_content(self, request: web.Request) -> web.Response:
        entered = await self._enter_card(request, "card_content")
        if isinstance(entered, web.Response):
            return entered
        card, body = entered
        if not card.streaming:
            return web.json_response({"code": 300309, "msg": "streaming mode is closed"}, status=400)
        refused = card_refusal(with_content(card.card, body["content"])) or self._sequence(card, int(body["sequence"]))
        if refused is not None:
            return refused
        card.content = body["content"]
        card.updates.append((time.monotonic(), body["content"]))
        return web.json_response({"code": 0, "data": {}})

    async def _card_settings(self, request: web.Request) -> web.Response:
        entered = await self._enter_card(request, "card_settings")
        if isinstance(entered, web.Response):
            return entered
        card, body = entered
        refused = self._sequence(card, int(body["sequence"]))
        if refused is not None:
            return refused
        settings = json.loads(body["settings"])
        card.settings.append(settings)
        if "streaming_mode" in settings.get("config", {}):
            card.streaming = bool(settings["config"]["streaming_mode"])
        return web.json_response({"code": 0, "data": {}})

    async def _card_update(self, request: web.Request) -> web.Response:
        """The full card update: replaces the card (text, config) in one call, streaming or not."""
        entered = await self._enter_card(request, "card_update")
        if isinstance(entered, web.Response):
            return entered
        card, body = entered
        parsed = parse_full_update(body)
        if isinstance(parsed, str):
            return web.json_response({"code": 99992402, "msg": f"field validation failed: {parsed}"}, status=400)
        refused = card_refusal(parsed) or self._sequence(card, body["sequence"])
        if refused is not None:
            return refused
        card.apply_full_update(parsed, time.monotonic())
        return web.json_response({"code": 0, "data": {}})

    # --- the long connection ------------------------------------------------------------------------

    async def _ws_endpoint(self, request: web.Request) -> web.Response:
        body = await request.json()
        app_id = body.get("AppID", "")
        self.endpoint_requests.append(app_id)
        while app_id in self.hang_endpoint and not self._closed:
            self.endpoint_hanging.add(app_id)
            self._changed.set()
            await self._unhang.wait()
        self.endpoint_hanging.discard(app_id)
        if self.refuse_endpoint.get(app_id, 0) > 0:
            self.refuse_endpoint[app_id] -= 1
            return web.json_response({"code": 1000040350, "msg": "exceed conn limit"})
        if self.apps.get(app_id) != body.get("AppSecret"):
            return web.json_response({"code": 10003, "msg": "invalid app_id or app_secret"})
        assert self.server is not None
        url = f"ws://127.0.0.1:{self.server.port}/ws?device_id={app_id}&service_id=7"
        config = {"ReconnectCount": -1, "ReconnectInterval": 1, "ReconnectNonce": 0, "PingInterval": 1}
        return web.json_response({"code": 0, "data": {"URL": url, "ClientConfig": config}})

    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        from lark_oapi.ws.pb.pbbp2_pb2 import Frame

        device = request.query["device_id"]
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.ws[device] = ws
        self.ws_closed.clear()
        self.ws_connected.set()
        self._changed.set()
        async for msg in ws:
            if msg.type != WSMsgType.BINARY:
                continue
            frame = Frame()
            frame.ParseFromString(msg.data)
            headers = {h.key: h.value for h in frame.headers}
            if frame.method == 0 and headers.get("type") == "ping":
                self.ws_pings += 1
                self.pings[device] = self.pings.get(device, 0) + 1
                await ws.send_bytes(ws_frame(Frame, 0, {"type": "pong"}, b"", frame.service))
            elif frame.method == 1:
                future = self._acks.pop(headers.get("message_id", ""), None)
                if future is not None and not future.done():
                    future.set_result({"ack": json.loads(frame.payload), "headers": headers})
        if self.ws.get(device) is ws:  # an older connection closing after a newer one came leaves the newer one
            del self.ws[device]
        self.ws_closed.set()
        self._changed.set()
        return ws

    async def push_event(self, app_id: str, envelope: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
        """Push one event over the app's long connection; returns the client's ACK frame."""
        from lark_oapi.ws.pb.pbbp2_pb2 import Frame

        ws = self.ws[app_id]
        frame_id = f"msg_{next(self._n)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._acks[frame_id] = future
        headers = {"type": "event", "message_id": frame_id, "trace_id": "tr1", "sum": "1", "seq": "0"}
        await ws.send_bytes(ws_frame(Frame, 1, headers, compact_json(envelope).encode(), 7))
        return await asyncio.wait_for(future, timeout)
