"""A small async client for Feishu open-apis on aiohttp: pooled connections, non-blocking tenant token, backoff."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

import aiohttp
import structlog
from pydantic import SecretStr

from agenthub import jsonsafe
from agenthub.errors import ChannelSendError
from channels.feishu.answers import RecentAnswers
from channels.feishu.pace import FIRST, NORMAL, URGENT, RateGate
from channels.toolkit.media import BodyTooLarge, read_at_most

log = structlog.get_logger(__name__)

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"
RESOURCE_PATH = "/open-apis/im/v1/messages/{message_id}/resources/{file_key}"
ERROR_BODY_MAX = 64 * 1024
"""An error answer of a download is JSON `{code, msg}`; no more than this of it is read."""
RATE_LIMITED = 99991400
TOKEN_REJECTED = frozenset({99991661, 99991663, 99991668})
PERMISSION_DENIED = frozenset({99991672, 99991679, 200340})
"""Missing scopes or app permission: these (and HTTP 403) turn CardKit off for the app. CardKit's 230099 is
not one: it is a failure to create one card's content (too large, too many tables, …), see feishu.md §5.3."""
MAX_BACKOFF_S = 10.0
"""The longest backoff after a transport error, or after a rate limit that names no reset time."""
MAX_RATE_WAIT_S = 60.0
"""The longest wait for Feishu's `x-ogw-ratelimit-reset` (feishu.md §5.3): honoured up to this, so a bad
header cannot stall a turn for long."""
CARD_UPDATES_PER_S = 14.0
CARD_UPDATE_BURST = 26
"""CardKit allows an app 50 card-content updates/s and 1000/min. A bucket of 26 refilled at 14/s allows at
most 40 in any second and 866 in any minute: under both, and 26 new turns still get their first text at once."""

Pace = Literal["first", "urgent", "normal"]
_PRIORITY: dict[Pace, int] = {"first": FIRST, "urgent": URGENT, "normal": NORMAL}


class FeishuApiError(ChannelSendError):
    """Feishu answered an error (`code` is Feishu's, `status` the HTTP status; 0 for a transport failure)."""

    def __init__(self, op: str, code: int, msg: str, status: int = 200) -> None:
        super().__init__(f"feishu {op} failed: code={code} status={status} msg={msg}")
        self.op = op
        self.code = code
        self.status = status

    @property
    def permission_denied(self) -> bool:
        return self.code in PERMISSION_DENIED or self.status == 403


@dataclass(frozen=True, slots=True)
class Resource:
    """One downloaded message resource: its bytes, Content-Type and the file name Feishu gives it (may be "")."""

    data: bytes = field(repr=False)
    mime_type: str
    file_name: str


class ResourceTooLarge(Exception):
    """A resource is larger than the caller's limit; `size` is its declared length (None: it was streamed and
    stopped past the limit)."""

    def __init__(self, size: int | None, limit: int) -> None:
        super().__init__(f"resource larger than {limit} bytes (declared: {size})")
        self.size = size
        self.limit = limit


class Superseded(Exception):
    """A paced call was given up before it was sent, because its `unless` event was set."""


class FeishuApi:
    """One app's open-apis client; create it inside a running loop, `close()` it on stop."""

    def __init__(
        self,
        base_url: str,
        app_id: str,
        app_secret: SecretStr,
        *,
        timeout_s: float = 10.0,
        max_retries: int = 3,
        card_updates_per_s: float = CARD_UPDATES_PER_S,
        card_update_burst: int = CARD_UPDATE_BURST,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app_id = app_id
        self._base = base_url.rstrip("/")
        self._secret = app_secret
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._max_retries = max_retries
        self._sleep = sleep
        self._clock = clock
        self._session = aiohttp.ClientSession(timeout=self._timeout, trust_env=True)
        self._token: str | None = None
        self._token_until = 0.0
        self._token_lock = asyncio.Lock()
        self.token_fetches = 0
        self.answers = RecentAnswers()
        """What this app answered, by the ids of the messages it sent in reply (see `reply()`)."""
        self.card_gate = RateGate(card_updates_per_s, burst=card_update_burst, name=app_id, clock=clock, sleep=sleep)
        """Shared by every CardKit update of this app (each attempt, retries included), whichever card."""

    async def close(self) -> None:
        await self.card_gate.close()
        await self._session.close()

    async def tenant_token(self) -> str:
        """The cached `tenant_access_token`, fetched with aiohttp when missing or within 10 min of expiry."""
        async with self._token_lock:
            if self._token is not None and self._clock() < self._token_until:
                return self._token
            body = {"app_id": self.app_id, "app_secret": self._secret.get_secret_value()}
            status, _, data = await self._raw("POST", TOKEN_PATH, body, None, "tenant_token")
            if data.get("code") != 0 or not data.get("tenant_access_token"):
                raise FeishuApiError("tenant_token", int(data.get("code", -1)), str(data.get("msg")), status)
            self.token_fetches += 1
            self._token = str(data["tenant_access_token"])
            self._token_until = self._clock() + max(60.0, float(data.get("expire", 7200)) - 600)
            return self._token

    async def call(
        self,
        method: str,
        path: str,
        op: str,
        body: Any = None,
        params: dict[str, str] | None = None,
        *,
        pace: Pace | None = None,
        unless: asyncio.Event | None = None,
    ) -> dict[str, Any]:
        """One authenticated call; retries rate limits (until the reset header), transport errors and one
        rejected token. With `pace`, every attempt first passes the app's card-update gate, and raises
        `Superseded` if `unless` is set while it waits there. Returns the response's `data` object; raises
        `FeishuApiError`."""
        token_retried = False
        attempt = 0
        while True:
            token = await self.tenant_token()
            if pace is not None and not await self.card_gate.wait(priority=_PRIORITY[pace], unless=unless):
                raise Superseded(op)
            try:
                status, headers, data = await self._raw(method, path, body, token, op, params)
            except FeishuApiError as e:
                if e.status != 0 or attempt >= self._max_retries:
                    raise
                attempt += 1
                await self._sleep(min(MAX_BACKOFF_S, 0.2 * 2.0**attempt))
                continue
            code = int(data.get("code", -1))
            if code == 0 and status < 400:
                result = data.get("data")
                return result if isinstance(result, dict) else {}
            if (status == 429 or code == RATE_LIMITED) and attempt < self._max_retries:
                attempt += 1
                delay = _reset_delay(headers, attempt)
                log.warning("feishu_rate_limited", op=op, app_id=self.app_id, retry_in_s=delay)
                await self._sleep(delay)
                continue
            if code in TOKEN_REJECTED and not token_retried:
                token_retried = True
                self._token = None
                continue
            raise FeishuApiError(op, code, str(data.get("msg", "")), status)

    async def _raw(
        self,
        method: str,
        path: str,
        body: Any,
        token: str | None,
        op: str,
        params: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], dict[str, Any]]:
        headers = {"Content-Type": "application/json; charset=utf-8"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        try:
            async with self._session.request(
                method, self._base + path, json=body, headers=headers, params=params
            ) as resp:
                raw = await resp.read()
                status, resp_headers = resp.status, {k.lower(): v for k, v in resp.headers.items()}
        except (aiohttp.ClientError, TimeoutError) as e:
            raise FeishuApiError(op, -1, type(e).__name__, 0) from e
        try:
            data = jsonsafe.loads(raw) if raw else {}
        except ValueError:
            data = {"code": -1, "msg": f"non-JSON answer (HTTP {status})"}
        if not isinstance(data, dict):
            data = {"code": -1, "msg": f"unexpected answer (HTTP {status})"}
        return status, resp_headers, data

    # --- endpoints -------------------------------------------------------------------------------

    async def bot_open_id(self) -> str:
        """`GET /open-apis/bot/v3/info`: the bot's own open_id (the answer carries `bot`, not `data`)."""
        token = await self.tenant_token()
        status, _, data = await self._raw("GET", "/open-apis/bot/v3/info", None, token, "bot_info")
        bot = data.get("bot")
        if data.get("code") != 0 or not isinstance(bot, dict) or not bot.get("open_id"):
            raise FeishuApiError("bot_info", int(data.get("code", -1)), str(data.get("msg", "")), status)
        return str(bot["open_id"])

    async def reply(self, message_id: str, msg_type: str, content: dict[str, Any], uuid: str) -> str:
        body = {"msg_type": msg_type, "content": json.dumps(content, ensure_ascii=False), "uuid": uuid}
        data = await self.call("POST", f"/open-apis/im/v1/messages/{message_id}/reply", "reply", body)
        sent = str(data.get("message_id", ""))
        self.answers.sent(sent, message_id)
        return sent

    async def create(
        self, receive_id_type: str, receive_id: str, msg_type: str, content: dict[str, Any], uuid: str
    ) -> str:
        body = {
            "receive_id": receive_id,
            "msg_type": msg_type,
            "content": json.dumps(content, ensure_ascii=False),
            "uuid": uuid,
        }
        params = {"receive_id_type": receive_id_type}
        data = await self.call("POST", "/open-apis/im/v1/messages", "create", body, params)
        return str(data.get("message_id", ""))

    async def get_message(self, message_id: str) -> dict[str, Any]:
        """`GET /open-apis/im/v1/messages/:message_id`: the message (`msg_type`, `body.content`, `sender`,
        `mentions`), cards as the JSON they were sent with rather than Feishu's "upgrade your client" stub."""
        path = f"/open-apis/im/v1/messages/{message_id}"
        params = {"user_id_type": "open_id", "card_msg_content_type": "user_card_content"}
        data = await self.call("GET", path, "message_get", None, params)
        items = data.get("items")
        if not isinstance(items, list) or not items or not isinstance(items[0], dict):
            raise FeishuApiError("message_get", -1, "no message in answer")
        return items[0]

    async def message_resource(
        self, message_id: str, file_key: str, kind: Literal["image", "file"], *, max_bytes: int, timeout_s: float
    ) -> Resource:
        """`GET /open-apis/im/v1/messages/:message_id/resources/:file_key?type=image|file`: the image or file a
        user sent, read as it streams and given up past `max_bytes` (`ResourceTooLarge`) or `timeout_s`
        (`FeishuApiError`, status 0); a rejected token is renewed once and a rate limit waited out up to
        `max_retries` times. Raises `FeishuApiError` for Feishu's errors."""
        path = RESOURCE_PATH.format(message_id=message_id, file_key=file_key)
        token_retried, attempt = False, 0
        while True:
            token = await self.tenant_token()
            try:
                return await self._download(path, kind, token, max_bytes, timeout_s)
            except FeishuApiError as e:
                if (e.status == 429 or e.code == RATE_LIMITED) and attempt < self._max_retries:
                    attempt += 1
                    delay = _reset_delay({}, attempt)
                    log.warning("feishu_rate_limited", op=e.op, app_id=self.app_id, retry_in_s=delay)
                    await self._sleep(delay)
                    continue
                if e.code not in TOKEN_REJECTED or token_retried:
                    raise
                token_retried = True
                self._token = None

    async def _download(self, path: str, kind: str, token: str, max_bytes: int, timeout_s: float) -> Resource:
        headers = {"Authorization": f"Bearer {token}"}
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        try:
            async with self._session.get(
                self._base + path, params={"type": kind}, headers=headers, timeout=timeout
            ) as resp:
                if not 200 <= resp.status < 300:
                    raise _download_error(resp.status, await resp.content.read(ERROR_BODY_MAX))
                try:
                    data = await read_at_most(resp, max_bytes)
                except BodyTooLarge as e:
                    raise ResourceTooLarge(e.declared, max_bytes) from None
                name = resp.content_disposition.filename if resp.content_disposition else None
                return Resource(data, resp.content_type, name or "")
        except (aiohttp.ClientError, TimeoutError) as e:
            raise FeishuApiError("message_resource", -1, type(e).__name__, 0) from e

    async def user(self, open_id: str) -> dict[str, Any]:
        """`GET /open-apis/contact/v3/users/:user_id?user_id_type=open_id` (lark-oapi `contact.v3.user.get`): the
        user object (`name`, `en_name`, … as the app's contact scopes allow); raises `FeishuApiError`."""
        path = f"/open-apis/contact/v3/users/{quote(open_id, safe='')}"
        data = await self.call("GET", path, "contact_user", None, {"user_id_type": "open_id"})
        user = data.get("user")
        return user if isinstance(user, dict) else {}

    async def contact_scopes(self) -> dict[str, Any]:
        """`GET /open-apis/contact/v3/scopes` (lark-oapi `contact.v3.scope.list`): the contact range the app may read;
        raises `FeishuApiError` (99991672 without a contact scope)."""
        params = {"user_id_type": "open_id", "page_size": "1"}
        return await self.call("GET", "/open-apis/contact/v3/scopes", "contact_scopes", None, params)

    async def add_reaction(self, message_id: str, emoji_type: str) -> None:
        body = {"reaction_type": {"emoji_type": emoji_type}}
        await self.call("POST", f"/open-apis/im/v1/messages/{message_id}/reactions", "reaction", body)

    async def create_card(self, card: dict[str, Any]) -> str:
        body = {"type": "card_json", "data": json.dumps(card, ensure_ascii=False)}
        data = await self.call("POST", "/open-apis/cardkit/v1/cards", "card_create", body)
        card_id = data.get("card_id")
        if not card_id:
            raise FeishuApiError("card_create", -1, "no card_id in answer")
        return str(card_id)

    async def card_content(
        self,
        card_id: str,
        element_id: str,
        content: str,
        sequence: int,
        uuid: str,
        *,
        pace: Pace = "urgent",
        superseded: asyncio.Event | None = None,
    ) -> bool:
        """Set an element's text, paced by the app's card gate (`pace`: a card's first text, then finals and
        closes, then snapshots). With `superseded`, the call is dropped (returns False, nothing sent) if that
        event is set while it waits for the gate, as the caller then has something newer to send."""
        body = {"content": content, "sequence": sequence, "uuid": uuid}
        path = f"/open-apis/cardkit/v1/cards/{card_id}/elements/{element_id}/content"
        try:
            await self.call("PUT", path, "card_content", body, pace=pace, unless=superseded)
        except Superseded:
            return False
        return True

    async def card_update(self, card_id: str, card: dict[str, Any], sequence: int, uuid: str) -> None:
        """Replace the whole card entity (`PUT …/cards/:card_id`), paced ahead of snapshots like a close."""
        body = {
            "card": {"type": "card_json", "data": json.dumps(card, ensure_ascii=False)},
            "sequence": sequence,
            "uuid": uuid,
        }
        await self.call("PUT", f"/open-apis/cardkit/v1/cards/{card_id}", "card_update", body, pace="urgent")

    async def card_settings(self, card_id: str, settings: dict[str, Any], sequence: int, uuid: str) -> None:
        body = {"settings": json.dumps(settings, ensure_ascii=False), "sequence": sequence, "uuid": uuid}
        path = f"/open-apis/cardkit/v1/cards/{card_id}/settings"
        await self.call("PATCH", path, "card_settings", body, pace="urgent")


def _download_error(status: int, raw: bytes) -> FeishuApiError:
    """Feishu's JSON error of a download (`{code, msg}`), or a generic one when the answer is not that."""
    try:
        data = jsonsafe.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return FeishuApiError("message_resource", -1, f"non-JSON answer (HTTP {status})", status)
    code = data.get("code")
    return FeishuApiError("message_resource", code if isinstance(code, int) else -1, str(data.get("msg", "")), status)


def _reset_delay(headers: dict[str, str], attempt: int) -> float:
    """Seconds until Feishu's rate-limit window resets (`x-ogw-ratelimit-reset`, or `Retry-After`), at most
    `MAX_RATE_WAIT_S`; without either header, exponential backoff."""
    for name in ("x-ogw-ratelimit-reset", "retry-after"):
        value = headers.get(name)
        if value:
            try:
                return min(MAX_RATE_WAIT_S, max(0.05, float(value)))
            except ValueError:
                pass
    return min(MAX_BACKOFF_S, 0.25 * 2.0**attempt)
