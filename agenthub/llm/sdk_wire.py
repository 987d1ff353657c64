"""`MessagesWire`: the SDK's client, and the streamed Messages request it sends, prepared once per client.

The SDK rebuilds its whole request on every call (options model, headers through three merges, the URL, an
`httpx2.Request` through the client's merges, an `AsyncStream` over its own SSE decoder): about three quarters of
a turn's CPU in the SDK on a short session. Here the SDK builds that request once (`_build_request`, its own code:
the same headers, URL and timeouts it would send) and every call sends a copy with its own body through the SDK's
HTTP client (`send`: its aiohttp transport, its proxies and connection pool). Failures become the SDK's own
exceptions through its own mapping (`_make_status_error_from_response`, `_make_timeout_error`,
`_make_connection_error`, `_make_status_error`), so that `failures.classify` sees what the SDK would raise.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx2
from anthropic._models import FinalRequestOptions

from agenthub.llm.endpoint import Endpoint

__all__ = ["MESSAGES_PATH", "STREAM_HEADERS", "MessagesWire"]

MESSAGES_PATH = "/v1/messages"
STREAM_HEADERS = {"x-stainless-helper-method": "stream", "x-stainless-stream-helper": "messages"}
"""What `messages.stream` adds to its request (`lib/_stainless_helpers.py`); kept so that the wire stays as it was."""
CACHE_DIAGNOSIS_BETA = "cache-diagnosis-2026-04-07"
"""The beta header Anthropic's cache diagnostics were introduced under; sent with every request that asks for them."""
_PER_BODY = ("content-length",)
"""Headers of the prepared request that belong to its (empty) body; each call's request gets its own."""


class MessagesWire:
    """One long-lived `AsyncAnthropic` on the SDK's aiohttp transport (retries are ours: `max_retries=0`), and its
    streamed Messages request, prepared with and without the cache-diagnosis beta."""

    def __init__(self, endpoint: Endpoint, timeout_s: float, connect_timeout_s: float) -> None:
        key = endpoint.api_key or ""
        self.http = anthropic.DefaultAioHttpClient()
        self.sdk = anthropic.AsyncAnthropic(
            api_key=key,
            base_url=endpoint.base_url,
            timeout=anthropic.Timeout(timeout_s, connect=connect_timeout_s),
            max_retries=0,
            default_headers={"x-api-key": key} if endpoint.custom_base_url else None,
            http_client=self.http,
        )
        self._prepared: dict[bool, httpx2.Request] = {}
        self._auth: Any = self.sdk.custom_auth or httpx2.USE_CLIENT_DEFAULT
        """What the SDK's `_attempt_request` passes as `auth` (its credentials' token flow, when it has one)."""

    async def close(self) -> None:
        await self.sdk.close()

    def prepared(self, diagnostics: bool) -> httpx2.Request:
        """The request the SDK makes for a streamed Messages call, without a body (built on first use: the SDK
        reads the platform and the async library for its headers then)."""
        request = self._prepared.get(diagnostics)
        if request is None:
            headers = {**STREAM_HEADERS, "anthropic-beta": CACHE_DIAGNOSIS_BETA} if diagnostics else STREAM_HEADERS
            options = FinalRequestOptions.construct(method="post", url=MESSAGES_PATH, headers=headers)
            request = self.sdk._build_request(options)
            for name in _PER_BODY:
                request.headers.pop(name, None)
            self._prepared[diagnostics] = request
        return request

    def request(self, body: bytes, diagnostics: bool) -> httpx2.Request:
        """The prepared request with `body`, as `httpx2.Request(..., content=body, cookies=...)` over the prepared
        one makes it (its headers, the client's cookie header, then `Content-Length`; the body read), without
        httpx2 deriving the content headers again (a content-type lookup, a `setdefault` through a `KeyError`, and a
        second copy of every header through its auto headers) on each call."""
        prepared = self.prepared(diagnostics)
        request = httpx2.Request(
            "POST",
            prepared.url,
            headers=prepared.headers,
            stream=httpx2.ByteStream(body),
            extensions=prepared.extensions,
        )
        cookies = self.http.cookies
        if cookies:
            cookies.set_cookie_header(request)
        request.headers["Content-Length"] = str(len(body))
        request.read()
        return request

    async def send(self, body: bytes, diagnostics: bool) -> httpx2.Response:
        """POST `body`; the response once its status and headers are in (2xx: its body still to read). Raises what
        the SDK's `_attempt_request` and `_request` raise: `APITimeoutError`, `APIConnectionError`, or the
        `APIStatusError` subclass for the status."""
        request = self.request(body, diagnostics)
        try:
            response = await self.http.send(request, stream=True, auth=self._auth)
        except httpx2.TimeoutException as err:
            raise self.sdk._make_timeout_error(request, err) from err
        except anthropic.AnthropicError:
            raise
        except Exception as err:
            raise self.sdk._make_connection_error(request, err) from err
        if response.is_success:
            return response
        try:
            await response.aread()
        finally:
            await response.aclose()
        raise self.sdk._make_status_error_from_response(response) from None

    async def chunks(self, response: httpx2.Response) -> AsyncIterator[bytes]:
        """The body of a streamed response as it arrives; a failed read raises as the SDK's
        `async_iter_response_bytes` does (`APITimeoutError`, `APIConnectionError`)."""
        body = response.aiter_bytes()
        while True:
            try:
                chunk = await anext(body, None)
            except httpx2.TimeoutException as err:
                raise self.sdk._make_timeout_error(response.request, err) from err
            except anthropic.AnthropicError:
                raise
            except Exception as err:
                raise self.sdk._make_connection_error(response.request, err) from err
            if chunk is None:
                return
            yield chunk

    def stream_error(self, data: bytes, response: httpx2.Response) -> anthropic.APIStatusError:
        """What the SDK raises for an `event: error` inside a stream (its `AsyncStream.__stream__`)."""
        text = data.decode("utf-8", "replace")
        body: Any = text
        try:
            body = json.loads(text)
            message = f"{body}"
        except ValueError:
            message = text or f"Error code: {response.status_code}"
        return self.sdk._make_status_error(message, body=body, response=response)
