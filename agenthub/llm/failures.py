"""Translate SDK and transport exceptions into AgentHub's `LLMError` tree and decide which are retryable.

LLMError (agenthub.errors)
├── ContextOverflowError   400 "prompt is too long" and vendor phrasings; never retried here
├── ModelNotFoundError     404 not_found_error, or a vendor's 400 naming an unknown model (DeepSeek:
│                          "Model Not Exist"); the turn may fall back to the agent's model
└── RequestRejectedError   any other 400 (e.g. a vendor without image input); the turn may retry without images
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agenthub.errors import ContextOverflowError, LLMError, ModelNotFoundError, RequestRejectedError
from agenthub.i18n import Text
from agenthub.llm import transport

if TYPE_CHECKING:
    import anthropic
    import httpx2

__all__ = ["ModelNotFoundError", "classify", "is_overflow_message"]


OVERFLOW_PHRASES = (
    "prompt is too long",
    "request_too_large",
    "context length exceeded",
    "context_length_exceeded",
    "input is too long",
    "maximum context",
    "token limit",
    "too many tokens",
    "exceeds the model's maximum",
    "reduce the length",
)

MODEL_NOT_FOUND_PHRASES = (
    "model not exist",  # DeepSeek: 400 invalid_request_error "Model Not Exist"
    "model does not exist",  # OpenAI-style and resellers: "The model `x` does not exist", "Model does not exist."
    "model_not_found",
    "model not found",
    "invalid model",
    "unknown model",
    "模型不存在",  # Zhipu and other Chinese vendors
)
MODEL_NAMED_NOT_FOUND = re.compile(r"\bmodel\b[^.\n]{0,120}?\b(?:does not exist|not exist|not found)")
"""The forms that name the model in between: "The model `x` does not exist", "model: x not found"."""

RETRYABLE_STREAM_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})

MSG_BUSY = Text("llm.busy")
MSG_TIMEOUT = Text("llm.timeout")
MSG_NETWORK = Text("llm.network")
MSG_AUTH = Text("llm.auth")
MSG_BILLING = Text("llm.billing")
MSG_OVERFLOW = Text("llm.overflow")
MSG_REJECTED = Text("llm.rejected")
MSG_UNEXPECTED = Text("llm.unexpected")
MSG_INTERRUPTED = Text("llm.interrupted")


@dataclass(frozen=True)
class Failure:
    """A classified failure: the error to raise, whether a retry may help, and a server-requested delay."""

    error: LLMError
    retryable: bool
    retry_after_s: float | None = None


def is_overflow_message(text: str) -> bool:
    """True when an error text says the prompt exceeded the context window."""
    lowered = text.lower()
    return any(phrase in lowered for phrase in OVERFLOW_PHRASES)


def is_model_not_found_message(text: str) -> bool:
    """True when a 400's error text (or type) says the requested model name is unknown."""
    lowered = text.lower()
    return any(phrase in lowered for phrase in MODEL_NOT_FOUND_PHRASES) or bool(MODEL_NAMED_NOT_FOUND.search(lowered))


def retry_after_s(headers: httpx2.Headers | None) -> float | None:
    """`retry-after-ms`, then `retry-after` (seconds), as seconds; None when absent or unparsable."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            value = float(raw) * scale
        except ValueError:
            continue
        if value >= 0:
            return value
    return None


def classify(exc: BaseException, *, model: str, secret: str | None = None) -> Failure:
    """Classify an exception raised by one attempt (never called with `CancelledError`)."""
    import anthropic  # here: the SDK is loaded by then (the attempt used it), and this module stays light
    import httpx2

    if isinstance(exc, LLMError):
        return Failure(exc, exc.retryable)
    if isinstance(exc, anthropic.APIStatusError):
        return _classify_status(exc, model, secret)
    if isinstance(exc, anthropic.APITimeoutError | httpx2.TimeoutException):
        return Failure(LLMError(f"timeout: {transport.describe(exc)}", user_text=MSG_TIMEOUT), True)
    if isinstance(exc, anthropic.APIConnectionError | httpx2.TransportError):
        return Failure(LLMError(f"connection error: {transport.describe(exc)}", user_text=MSG_NETWORK), True)
    return Failure(LLMError(f"unexpected error: {type(exc).__name__}", user_text=MSG_UNEXPECTED), False)


def _classify_status(exc: anthropic.APIStatusError, model: str, secret: str | None) -> Failure:
    status, kind = exc.status_code, str(exc.type or "")
    detail = str(exc.api_message or "")
    if secret:  # some vendors echo the credential back in their error text
        detail = detail.replace(secret, "***")
    summary = f"HTTP {status} {kind}: {detail[:300]}"
    if status in (400, 413) and (is_overflow_message(detail) or kind == "request_too_large"):
        return Failure(ContextOverflowError(summary, user_text=MSG_OVERFLOW), False)
    if status == 200:  # an `event: error` inside a stream
        if is_overflow_message(detail):
            return Failure(ContextOverflowError(summary, user_text=MSG_OVERFLOW), False)
        return Failure(LLMError(summary, user_text=MSG_BUSY), kind in RETRYABLE_STREAM_TYPES)
    if status in (401, 403):
        return Failure(LLMError(summary, user_text=MSG_AUTH), False)
    if status == 402:
        return Failure(LLMError(summary, user_text=MSG_BILLING), False)
    if status == 404 or (status == 400 and is_model_not_found_message(f"{kind} {detail}")):
        user = Text("llm.model_unknown", {"model": repr(model[:100])})
        return Failure(ModelNotFoundError(summary, user_text=user, model=model), False)
    headers = exc.response.headers
    delay = retry_after_s(headers)
    retryable = status in (408, 409, 429) or status >= 500
    should_retry = headers.get("x-should-retry")
    if should_retry in ("true", "false"):
        retryable = should_retry == "true"
    user = MSG_BUSY if status == 429 or status >= 500 else MSG_REJECTED
    if status == 400:
        return Failure(RequestRejectedError(summary, user_text=user, retryable=retryable), retryable, delay)
    return Failure(LLMError(summary, user_text=user, retryable=retryable), retryable, delay)
