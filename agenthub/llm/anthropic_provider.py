"""`AnthropicProvider`: one long-lived `AsyncAnthropic` (aiohttp transport) per endpoint, with our own retries."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any

import anthropic
import structlog
from anthropic.types import Message

from agenthub.errors import ConfigError, LLMError
from agenthub.i18n import Text
from agenthub.llm.calllog import CallLog
from agenthub.llm.endpoint import Endpoint
from agenthub.llm.failures import MSG_INTERRUPTED, classify
from agenthub.llm.models import plausible_model_name
from agenthub.llm.types import LLMRequest, LLMResponse, Sleep, TextCallback
from agenthub.messages import Usage

log = structlog.get_logger(__name__)


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
        headers = {"x-api-key": endpoint.api_key} if endpoint.custom_base_url else None
        self._client = anthropic.AsyncAnthropic(
            api_key=endpoint.api_key,
            base_url=endpoint.base_url,
            timeout=anthropic.Timeout(timeout_s, connect=connect_timeout_s),
            max_retries=0,
            default_headers=headers,
            http_client=anthropic.DefaultAioHttpClient(),
        )

    def knows_model(self, model: str) -> bool:
        return plausible_model_name(model)

    async def aclose(self) -> None:
        await self._client.close()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        return await self.stream(request, None)

    async def stream(self, request: LLMRequest, on_text: TextCallback | None = None) -> LLMResponse:
        began = time.perf_counter()
        retry = 0
        while True:
            attempt = _Attempt(on_text)
            try:
                response = await self._attempt(request, attempt)
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

    async def _attempt(self, request: LLMRequest, attempt: _Attempt) -> LLMResponse:
        started = False
        async with self._client.messages.stream(**_call_kwargs(request)) as stream:
            async for event in stream:
                if event.type == "message_start":
                    started = True
                elif event.type == "text":
                    attempt.text(event.text)
            if not started:
                raise LLMError("stream ended before message_start", user_text=Text("llm.empty_reply"))
            final = await stream.get_final_message()
        return to_response(final)


def _call_kwargs(request: LLMRequest) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": request.messages,
    }
    if request.system:
        kwargs["system"] = request.system
    if request.tools:
        kwargs["tools"] = request.tools
    if request.tool_choice is not None:
        kwargs["tool_choice"] = request.tool_choice
    return kwargs


def _block_dict(block: Any) -> dict[str, Any]:
    kind = block.type
    if kind == "text":
        return {"type": "text", "text": block.text}
    if kind == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": dict(block.input)}
    if kind == "thinking":
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.data}
    dumped: dict[str, Any] = block.model_dump(mode="json", exclude_none=True)
    return dumped


def to_response(message: Message) -> LLMResponse:
    """Convert the SDK's final message into plain dicts and our `Usage`."""
    u = message.usage
    usage = Usage(
        input_tokens=u.input_tokens or 0,
        output_tokens=u.output_tokens or 0,
        cache_read_input_tokens=u.cache_read_input_tokens or 0,
        cache_creation_input_tokens=u.cache_creation_input_tokens or 0,
    )
    content = [_block_dict(b) for b in message.content]
    return LLMResponse(content=content, stop_reason=message.stop_reason, usage=usage, model=message.model)
