"""The Anthropic SDK's side of one call: the client, the request body, the streamed call, the reply.

Imported on first use (the SDK takes seconds to import; `AnthropicProvider` loads this module off the event loop).
The body is encoded here once and handed to the SDK's public `post` as `content`: our requests are plain JSON-ready
dicts already, and the SDK would otherwise copy the whole tree (`_utils/_prepare.py: copy_tree`, one Python step per
value) on every call, the larger part of a call's CPU on a long session.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
from anthropic import AsyncStream
from anthropic.lib.streaming import AsyncMessageStream
from anthropic.types import Message, RawMessageStreamEvent

from agenthub.errors import LLMError
from agenthub.i18n import Text
from agenthub.llm.endpoint import Endpoint
from agenthub.llm.types import LLMRequest, LLMResponse, TextCallback
from agenthub.messages import Usage

__all__ = ["new_client", "request_body", "stream", "to_response"]

MESSAGES_PATH = "/v1/messages"
STREAM_HEADERS = {"x-stainless-helper-method": "stream", "x-stainless-stream-helper": "messages"}
"""What `messages.stream` adds to its request (`lib/_stainless_helpers.py`); kept so that the wire stays as it was."""
CACHE_DIAGNOSIS_BETA = "cache-diagnosis-2026-04-07"
"""The beta header Anthropic's cache diagnostics were introduced under; sent with every request that asks for them."""

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def new_client(endpoint: Endpoint, timeout_s: float, connect_timeout_s: float) -> anthropic.AsyncAnthropic:
    """One long-lived client on the SDK's aiohttp transport; retries are ours (`max_retries=0`)."""
    key = endpoint.api_key or ""
    headers = {"x-api-key": key} if endpoint.custom_base_url else None
    return anthropic.AsyncAnthropic(
        api_key=key,
        base_url=endpoint.base_url,
        timeout=anthropic.Timeout(timeout_s, connect=connect_timeout_s),
        max_retries=0,
        default_headers=headers,
        http_client=anthropic.DefaultAioHttpClient(),
    )


def request_body(request: LLMRequest, diagnostics: dict[str, Any] | None = None) -> bytes:
    """The JSON body `messages.stream` would send for `request`; `diagnostics` (`{"previous_message_id": …}`) asks
    Anthropic's API why the prompt cache could not reuse that reply's prefix."""
    body: dict[str, Any] = {"max_tokens": request.max_tokens, "messages": request.messages, "model": request.model}
    if diagnostics is not None:
        body["diagnostics"] = diagnostics
    body["stream"] = True
    if request.system:
        body["system"] = request.system
    if request.tool_choice is not None:
        body["tool_choice"] = request.tool_choice
    if request.tools:
        body["tools"] = request.tools
    return _encode(body).encode()


async def stream(
    client: anthropic.AsyncAnthropic,
    request: LLMRequest,
    on_text: TextCallback,
    diagnostics: dict[str, Any] | None = None,
) -> LLMResponse:
    """One streamed call, each text delta passed to `on_text` as it arrives."""
    body = request_body(request, diagnostics)
    headers = STREAM_HEADERS if diagnostics is None else {**STREAM_HEADERS, "anthropic-beta": CACHE_DIAGNOSIS_BETA}
    raw = await client.post(
        MESSAGES_PATH,
        cast_to=Message,
        content=body,
        options={"headers": headers},
        stream=True,
        stream_cls=AsyncStream[RawMessageStreamEvent],
    )
    events: AsyncMessageStream[None] = AsyncMessageStream(raw, output_format=anthropic.NOT_GIVEN)
    try:
        started = False
        async for event in events:
            if event.type == "message_start":
                started = True
            elif event.type == "text":
                on_text(event.text)
        if not started:
            raise LLMError("stream ended before message_start", user_text=Text("llm.empty_reply"))
        final = await events.get_final_message()
    finally:
        await events.close()
    return to_response(final)


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
    return LLMResponse(
        content=content,
        stop_reason=message.stop_reason,
        usage=usage,
        model=message.model,
        message_id=message.id or "",
        cache_miss_reason=cache_miss_reason(message),
    )


def cache_miss_reason(message: Message) -> dict[str, Any] | None:
    """`diagnostics.cache_miss_reason` of the reply as plain data (`{"type": …, "cache_missed_input_tokens": …}`);
    None when the request asked for no diagnostics, nothing diverged, or the diagnosis was still pending."""
    diagnostics = getattr(message, "diagnostics", None)
    if isinstance(diagnostics, dict):
        reason = diagnostics.get("cache_miss_reason")
    else:
        reason = getattr(diagnostics, "cache_miss_reason", None)
    if isinstance(reason, dict):
        return reason
    if reason is None or not hasattr(reason, "model_dump"):
        return None
    dumped: dict[str, Any] = reason.model_dump(mode="json", exclude_none=True)
    return dumped
