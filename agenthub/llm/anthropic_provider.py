"""`AnthropicProvider`: one long-lived `AsyncAnthropic` (aiohttp transport) per endpoint, with our own retries.

The SDK (`agenthub.llm.sdk`) is imported off the event loop on first use or by `warm_up`, so that a start-up never
waits for it (it takes seconds to import).
"""

from __future__ import annotations

import asyncio
import importlib
import random
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

import structlog

from agenthub.errors import ConfigError, LLMError
from agenthub.llm.cache_watch import CacheWatch, anthropic_api
from agenthub.llm.calllog import CallLog
from agenthub.llm.endpoint import Endpoint
from agenthub.llm.failures import MSG_INTERRUPTED, MSG_UNEXPECTED, classify
from agenthub.llm.models import plausible_model_name
from agenthub.llm.types import LLMRequest, LLMResponse, Sleep, TextCallback

if TYPE_CHECKING:
    from agenthub.llm.sdk_wire import MessagesWire

log = structlog.get_logger(__name__)

SDK_MODULE = "agenthub.llm.sdk"
_sdk: ModuleType | None = None


_sdk_import_lock = threading.Lock()
_importer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sdk-import")
"""The SDK's import runs on a thread of its own, never on a worker of the default pool (the inbox's writes, the
history's files): the import takes seconds, and every turn of a cold process waits for it."""
_loading: dict[asyncio.AbstractEventLoop, asyncio.Future[ModuleType]] = {}


async def load_sdk() -> ModuleType:
    """`agenthub.llm.sdk` (and with it the `anthropic` SDK), imported on the importer thread the first time; the
    callers that come meanwhile wait for that one import."""
    global _sdk
    if _sdk is not None:
        return _sdk
    loop = asyncio.get_running_loop()
    loading = _loading.get(loop)
    if loading is None or (loading.done() and not loading.cancelled() and loading.exception() is not None):
        loading = _loading[loop] = asyncio.ensure_future(loop.run_in_executor(_importer, _import_sdk))
    try:
        _sdk = await asyncio.shield(loading)  # a caller cancelled leaves the import to the others
    finally:
        if loading.done():
            _loading.pop(loop, None)
    return _sdk


def _import_sdk() -> ModuleType:
    with _sdk_import_lock:  # one importing thread at a time: two importing one package can deadlock
        return importlib.import_module(SDK_MODULE)


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff: `base_s · 2^n` capped at `max_s`, up to `max_retries` retries, plus jitter."""

    max_retries: int = 3
    base_s: float = 0.5
    max_s: float = 8.0
    jitter: float = 0.1
    retry_after_cap_s: float = 60.0

    def delay(self, retry: int, retry_after: float | None) -> float:
        """Delay before retry number `retry` (0-based); a server's retry-after is honoured as a floor."""
        backoff = min(self.max_s, self.base_s * (2.0**retry)) * (1 + self.jitter * random.random())
        if retry_after is not None:
            backoff = max(backoff, min(retry_after, self.retry_after_cap_s))
        return backoff


class _Attempt:
    """Per-attempt state: whether any text already reached the caller."""

    def __init__(self, on_text: TextCallback | None) -> None:
        self.on_text = on_text
        self.emitted = False

    def text(self, delta: str) -> None:
        if self.on_text is not None and delta:
            self.emitted = True
            self.on_text(delta)


class AnthropicProvider:
    """An Anthropic-compatible endpoint. Raises `LLMError` (after retries) or `ContextOverflowError`;
    `asyncio.CancelledError` propagates and closes the HTTP response."""

    offline = False

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        name: str = "default",
        timeout_s: float = 25.0,
        connect_timeout_s: float = 10.0,
        retry: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
        call_log: CallLog | None = None,
        cache_diagnostics: bool | None = None,
    ) -> None:
        if not endpoint.api_key:
            raise ConfigError(f"llm provider {name!r}: no API key configured")
        self.name = name
        self.default_model = endpoint.model
        self.base_url = endpoint.base_url
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self.call_log = call_log or CallLog()
        self._secret = endpoint.api_key
        self._endpoint = endpoint
        self._timeout_s = timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._client: MessagesWire | None = None
        self._closed = False
        self.cache_diagnostics = anthropic_api(endpoint.base_url) if cache_diagnostics is None else cache_diagnostics
        """Ask for the vendor's cache diagnostics on a chat's calls: by default only where it is Anthropic's own API."""

    @property
    def closed(self) -> bool:
        return self._closed

    def knows_model(self, model: str) -> bool:
        return plausible_model_name(model)

    async def warm_up(self) -> None:
        """Import the SDK and build the client now (in a worker thread), so that the first call does not wait."""
        await self._sdk_client()

    async def _sdk_client(self) -> MessagesWire:
        sdk = await load_sdk()
        if self._closed:
            raise LLMError("the provider is closed", user_text=MSG_UNEXPECTED)
        if self._client is None:
            self._client = sdk.MessagesWire(self._endpoint, self._timeout_s, self._connect_timeout_s)
        return self._client

    async def aclose(self) -> None:
        self._closed = True
        if self._client is not None:
            await self._client.close()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """A call whose text nobody reads before its end (summaries, L3, titles). It streams all the same (design
        §7): the read timeout between events (`timeout_s`) finds a hung vendor early and leaves room for retries,
        where a whole-reply call would have to wait as long as `max_tokens` may take."""
        return await self._call(request, self._stream, None)

    async def stream(self, request: LLMRequest, on_text: TextCallback | None = None) -> LLMResponse:
        return await self._call(request, self._stream, on_text)

    async def _stream(self, request: LLMRequest, attempt: _Attempt) -> LLMResponse:
        client, sdk = await self._sdk_client(), await load_sdk()
        response: LLMResponse = await sdk.stream(client, request, attempt.text, self._diagnostics(request))
        return response

    def _diagnostics(self, request: LLMRequest) -> dict[str, str | None] | None:
        """`{"previous_message_id": …}` for a chat's call where cache diagnostics are asked for (None: the
        chat's first call here, which opts in); None otherwise."""
        if not self.cache_diagnostics or not CacheWatch.watched(request):
            return None
        return {"previous_message_id": self.call_log.cache.previous_message_id(request)}

    async def _call(self, request: LLMRequest, run: _AttemptFn, on_text: TextCallback | None) -> LLMResponse:
        began = time.perf_counter()
        retry = 0
        while True:
            attempt = _Attempt(on_text)
            try:
                response = await run(request, attempt)
            except Exception as e:
                failure = classify(e, model=request.model, secret=self._secret)
                fields = {"provider": self.name, "model": request.model, "attempt": retry + 1}
                if attempt.emitted:
                    log.warning("llm_stream_interrupted", error=str(failure.error), **fields)
                    raise LLMError(str(failure.error), user_text=MSG_INTERRUPTED) from e
                if not failure.retryable or retry >= self.retry.max_retries:
                    log.warning("llm_call_failed", error=str(failure.error), retryable=failure.retryable, **fields)
                    raise failure.error from e
                delay = self.retry.delay(retry, failure.retry_after_s)
                log.info("llm_retry", error=str(failure.error), delay_s=round(delay, 3), **fields)
            else:  # outside the try: a failing observer is not an API failure to retry (and pay for) again
                self.call_log.record(self.name, request, response, time.perf_counter() - began)
                return response
            await self._sleep(delay)
            retry += 1


_AttemptFn = Callable[[LLMRequest, _Attempt], Awaitable[LLMResponse]]
