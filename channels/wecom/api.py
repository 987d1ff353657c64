"""An async client for WeCom's `cgi-bin` API: a cached access token and `message/send`, with errcode hints."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import structlog

from agenthub import jsonsafe
from agenthub.errors import ChannelSendError
from channels.wecom.media import Download, MediaDownloadFailed, MediaTooLarge, disposition_filename, read_bounded

log = structlog.get_logger(__name__)

TOKEN_ERRCODES = frozenset({40001, 40014, 42001})
RATE_LIMIT_ERRCODES = frozenset({45009, 45033, -1})
TOKEN_EARLY_REFRESH_S = 300.0
ERROR_BODY_MAX_BYTES = 64 * 1024
"""`media/get` answers errors as a small JSON body (HTTP 200) instead of the file."""

ERRCODE_HINTS: dict[int, str] = {
    -1: "WeCom is busy; retried with backoff",
    40001: "invalid credential: check corp_id and the app secret (or the token was revoked)",
    40013: "invalid corp_id",
    40014: "invalid access_token; refetched once",
    40056: "invalid agent_id: check the app's AgentId",
    42001: "access_token expired; refetched once",
    44004: "empty message content",
    45009: "API call frequency limit reached; backing off",
    45033: "too many concurrent calls; backing off",
    48002: "the API is not allowed for this app: check its permissions in the admin console",
    60011: "the app may not message this user: check the app's visible range (可见范围)",
    60020: "this server's IP is not in the app's trusted IP list (企业可信IP): add the egress IP in the admin console",
    81013: "user not found in the app's visible range",
    82001: "all recipients are invalid or outside the app's visible range",
}


def errcode_hint(errcode: int) -> str:
    return ERRCODE_HINTS.get(errcode, "see https://developer.work.weixin.qq.com/document/path/90313")


class WorkApiError(ChannelSendError):
    """WeCom answered a call with a non-zero errcode."""

    def __init__(self, api: str, errcode: int, errmsg: str) -> None:
        self.errcode = errcode
        self.errmsg = errmsg
        self.hint = errcode_hint(errcode)
        super().__init__(f"wecom {api} failed: errcode {errcode} ({errmsg}); {self.hint}")


class WorkApi:
    """One app's API access: `gettoken` cached until expiry (single-flight), `message/send` with retries.

    On errcode 40001/40014/42001 the token is dropped, fetched again and the call repeated once; on
    45009/45033/-1 the call is repeated after a doubling backoff, at most `rate_limit_retries` times.
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        base_url: str,
        corp_id: str,
        secret: str,
        cred_id: str,
        timeout_s: float = 10.0,
        rate_limit_retries: int = 3,
        rate_limit_backoff_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._session = session
        self._base = base_url.rstrip("/") + "/cgi-bin/"
        self._corp_id = corp_id
        self._secret = secret
        self._cred_id = cred_id
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._rate_retries = rate_limit_retries
        self._backoff_s = rate_limit_backoff_s
        self._clock = clock
        self._sleep = sleep
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock = asyncio.Lock()

    async def token(self) -> str:
        """A valid access token, fetched only when none is cached or it is about to expire."""
        async with self._lock:
            if self._token is None or self._clock() >= self._expires_at:
                params = {"corpid": self._corp_id, "corpsecret": self._secret}
                data = await self._request("GET", "gettoken", params=params)
                self._check("gettoken", data)
                if not isinstance(data.get("access_token"), str) or not data["access_token"]:
                    raise ChannelSendError("wecom gettoken failed: the answer carries no access_token")
                self._token = data["access_token"]
                expires_in = float(data.get("expires_in", 7200))
                self._expires_at = self._clock() + max(expires_in - TOKEN_EARLY_REFRESH_S, expires_in / 2)
                log.info("wecom_token_fetched", cred_id=self._cred_id, expires_in=expires_in)
            return self._token

    def invalidate(self, token: str) -> None:
        """Forget `token` (unless a newer one already replaced it)."""
        if self._token == token:
            self._token = None

    async def send_message(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST `message/send`; raise `WorkApiError` / `ChannelSendError` when it is not delivered."""
        return await self.call("message/send", body)

    async def call(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST `api` with a JSON body; the answer, or `WorkApiError` / `ChannelSendError`."""
        return await self._call("POST", api, {}, body)

    async def get(self, api: str, params: dict[str, str]) -> dict[str, Any]:
        """GET `api` with query `params` (e.g. `user/get?userid=`), handled like `call`."""
        return await self._call("GET", api, params, None)

    async def _call(self, method: str, api: str, params: dict[str, str], body: dict[str, Any] | None) -> dict[str, Any]:
        refetched = False
        rate_tries = 0
        while True:
            token = await self.token()
            data = await self._request(method, api, params={**params, "access_token": token}, body=body)
            errcode = int(data.get("errcode", 0))
            if errcode in TOKEN_ERRCODES and not refetched:
                self._log_errcode(api, data)
                self.invalidate(token)
                refetched = True
                continue
            if errcode in RATE_LIMIT_ERRCODES and rate_tries < self._rate_retries:
                self._log_errcode(api, data)
                await self._sleep(self._backoff_s * 2**rate_tries)
                rate_tries += 1
                continue
            self._check(api, data)
            return data

    async def download_media(self, media_id: str, *, max_bytes: int, timeout_s: float) -> Download:
        """GET `media/get` (a temporary media file: image, voice, file) within `max_bytes` and `timeout_s`.

        Success is the file's bytes with its Content-Type and Content-disposition; failure a JSON errcode body.
        Errcodes are handled as in `call`: a token errcode refetches the token once, a rate-limit errcode is
        retried after a doubling backoff (all within `timeout_s`). Raises `MediaTooLarge` or
        `MediaDownloadFailed`.
        """
        try:
            async with asyncio.timeout(timeout_s):
                return await self._download_media(media_id, max_bytes)
        except TimeoutError:
            log.warning("wecom_media_timeout", cred_id=self._cred_id, media_id=media_id, timeout_s=timeout_s)
            raise MediaDownloadFailed("media/get timed out") from None
        except ChannelSendError as e:  # gettoken failed
            raise MediaDownloadFailed(str(e)) from None

    async def _download_media(self, media_id: str, max_bytes: int) -> Download:
        refetched = False
        rate_tries = 0
        while True:
            token = await self.token()
            result = await self._media_get(token, media_id, max_bytes)
            if isinstance(result, Download):
                return result
            errcode = _int_errcode(result)
            self._log_errcode("media/get", result)
            if errcode in TOKEN_ERRCODES and not refetched:
                self.invalidate(token)
                refetched = True
                continue
            if errcode in RATE_LIMIT_ERRCODES and rate_tries < self._rate_retries:
                await self._sleep(self._backoff_s * 2**rate_tries)
                rate_tries += 1
                continue
            raise MediaDownloadFailed(f"media/get failed: errcode {errcode}")

    async def _media_get(self, token: str, media_id: str, max_bytes: int) -> Download | dict[str, Any]:
        """One `media/get`: the file, or the parsed JSON error body."""
        params = {"access_token": token, "media_id": media_id}
        try:
            async with self._session.get(self._base + "media/get", params=params) as resp:
                if resp.status != 200:
                    raise MediaDownloadFailed(f"media/get: HTTP {resp.status}")
                disposition = resp.headers.get("Content-Disposition")
                if not _is_error_body(resp.headers.get("Content-Type"), disposition):
                    data = await read_bounded(resp, max_bytes)
                    return Download(data, disposition_filename(disposition), resp.headers.get("Content-Type"))
                payload = jsonsafe.loads(await _error_body(resp))
                return payload if isinstance(payload, dict) else {"errcode": -1, "errmsg": "unexpected response"}
        except (aiohttp.ClientError, ValueError) as e:  # never str(e): the url carries the token
            log.warning("wecom_api_unreachable", cred_id=self._cred_id, api="media/get", error=type(e).__name__)
            raise MediaDownloadFailed(f"media/get: {type(e).__name__}") from None

    def _check(self, api: str, data: dict[str, Any]) -> None:
        errcode = int(data.get("errcode", 0))
        if errcode != 0:
            self._log_errcode(api, data)
            raise WorkApiError(api, errcode, str(data.get("errmsg", "")))

    def _log_errcode(self, api: str, data: dict[str, Any]) -> None:
        errcode = int(data.get("errcode", 0))
        log.warning(
            "wecom_api_errcode",
            cred_id=self._cred_id,
            api=api,
            errcode=errcode,
            errmsg=str(data.get("errmsg", ""))[:200],
            hint=errcode_hint(errcode),
        )

    async def _request(
        self, method: str, api: str, *, params: dict[str, str], body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        headers = {"Content-Type": "application/json; charset=utf-8"} if data is not None else None
        try:
            async with self._session.request(
                method, self._base + api, params=params, data=data, headers=headers, timeout=self._timeout
            ) as resp:
                if resp.status != 200:
                    raise ChannelSendError(f"wecom {api} failed: HTTP {resp.status}")
                payload = jsonsafe.loads(await resp.read())
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            # Never put str(e) in the message: aiohttp includes the URL, which carries the access token.
            log.warning("wecom_api_unreachable", cred_id=self._cred_id, api=api, error=type(e).__name__)
            raise ChannelSendError(f"wecom {api} failed: {type(e).__name__}") from None
        if not isinstance(payload, dict):
            raise ChannelSendError(f"wecom {api} failed: unexpected response")
        return payload


def _is_error_body(content_type: str | None, disposition: str | None) -> bool:
    """`media/get` answers an error as a JSON body where the file would be, without a Content-disposition
    (a file always has one, so a user's own .json or .txt file is still a file)."""
    kind = (content_type or "").split(";")[0].strip().lower()
    return not disposition and kind in ("application/json", "text/json", "text/plain")


async def _error_body(resp: aiohttp.ClientResponse) -> bytes:
    try:
        return await read_bounded(resp, ERROR_BODY_MAX_BYTES)
    except MediaTooLarge:  # not an answer WeCom gives: the download failed, the user's file is not too large
        raise MediaDownloadFailed("media/get: oversized error body") from None


def _int_errcode(payload: dict[str, Any]) -> int:
    try:
        return int(payload.get("errcode", -1))
    except (TypeError, ValueError):
        return -1
