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

from agenthub.errors import LLMError
from agenthub.i18n import Text
from agenthub.ids import unique_uuid4
from agenthub.llm.endpoint import Endpoint
from agenthub.llm.identity import ByIdentity, PerChat, Repeated
from agenthub.llm.types import LLMRequest, LLMResponse, TextCallback
from agenthub.messages import Usage

__all__ = ["new_client", "request_body", "stream"]

MESSAGES_PATH = "/v1/messages"
STREAM_HEADERS = {"x-stainless-helper-method": "stream", "x-stainless-stream-helper": "messages"}
"""What `messages.stream` adds to its request (`lib/_stainless_helpers.py`); kept so that the wire stays as it was."""
CACHE_DIAGNOSIS_BETA = "cache-diagnosis-2026-04-07"
"""The beta header Anthropic's cache diagnostics were introduced under; sent with every request that asks for them."""

IDEMPOTENCY_PREFIX = "stainless-python-retry-"
"""The SDK's own form of the key it makes per request (`_idempotency_key`); ours is made without `os.urandom`."""
_EVENTS = AsyncStream[object]

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
    Anthropic's API why the prompt cache could not reuse that reply's prefix. The parts a chat's calls repeat (the
    same system blocks, tool definitions and earlier messages: objects never changed in place) are encoded once."""
    encoded = _encoded_messages(request.chat)(request.messages) if request.chat else map(_encoded, request.messages)
    parts = [f'{{"max_tokens":{_encode(request.max_tokens)},"messages":['.encode(), b",".join(encoded)]
    parts.append(f'],"model":{_encode(request.model)}'.encode())
    if diagnostics is not None:
        parts.append(b',"diagnostics":' + _encode(diagnostics).encode())
    parts.append(b',"stream":true')
    if request.system:
        parts.append(b',"system":' + _encoded_blocks(request.system))
    if request.tool_choice is not None:
        parts.append(b',"tool_choice":' + _encode(request.tool_choice).encode())
    if request.tools:
        parts.append(b',"tools":' + _encoded_blocks(request.tools))
    parts.append(b"}")
    return b"".join(parts)


def _encoded(value: Any) -> bytes:
    return _encode(value).encode()


_encoded_blocks = ByIdentity(_encoded)
"""The system blocks and tool definitions, which the context builder hands as the same lists while unchanged."""
_encoded_messages = PerChat(lambda: Repeated(_encoded))


async def stream(
    client: anthropic.AsyncAnthropic,
    request: LLMRequest,
    on_text: TextCallback,
    diagnostics: dict[str, Any] | None = None,
) -> LLMResponse:
    """One streamed call, each text delta passed to `on_text` as it arrives. The events come as the parsed JSON
    the SDK reads (its SSE decoding, its `error` event and HTTP status errors unchanged), and `_Reply` keeps only
    what the final response holds: no typed event object per delta, no snapshot of the message rebuilt per event."""
    body = request_body(request, diagnostics)
    headers = STREAM_HEADERS if diagnostics is None else {**STREAM_HEADERS, "anthropic-beta": CACHE_DIAGNOSIS_BETA}
    options: Any = {"headers": headers, "idempotency_key": f"{IDEMPOTENCY_PREFIX}{unique_uuid4()}"}
    events = await client.post(
        MESSAGES_PATH, cast_to=object, content=body, options=options, stream=True, stream_cls=_EVENTS
    )
    reply = _Reply(on_text)
    try:
        async for event in events:
            if isinstance(event, dict):
                reply.take(event)
    finally:
        await events.close()
    if not reply.started:
        raise LLMError("stream ended before message_start", user_text=Text("llm.empty_reply"))
    return reply.response()


_USAGE_KINDS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


class _Reply:
    """The message a stream of Messages API events describes, as plain dicts (what `messages.stream` accumulates,
    for the fields a response keeps): text and thinking deltas joined once at the end, a tool call's input parsed
    from its JSON pieces once its block is complete."""

    def __init__(self, on_text: TextCallback) -> None:
        self.on_text = on_text
        self.started = False
        self.message: dict[str, Any] = {}
        self.usage: dict[str, Any] = {}
        self.blocks: list[dict[str, Any]] = []
        self.parts: list[list[str]] = []
        """Per block: the text (or thinking, or tool input JSON) pieces received so far."""
        self.stop_reason: str | None = None

    def take(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "content_block_delta":
            self._delta(event)
        elif kind == "message_start":
            self.started = True
            self.message = event.get("message") or {}
            self.usage = dict(self.message.get("usage") or {})
        elif kind == "content_block_start":
            self.blocks.append(dict(event.get("content_block") or {}))
            self.parts.append([])
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            self.stop_reason = delta.get("stop_reason")
            usage = event.get("usage") or {}
            self.usage["output_tokens"] = usage.get("output_tokens")
            for name, value in usage.items():  # cumulative totals: a value given overwrites the start's
                if name != "output_tokens" and value is not None:
                    self.usage[name] = value

    def _delta(self, event: dict[str, Any]) -> None:
        index, delta = event.get("index"), event.get("delta") or {}
        if not isinstance(index, int) or not 0 <= index < len(self.blocks):
            return
        block, kind = self.blocks[index], delta.get("type")
        if kind == "text_delta" and block.get("type") == "text":
            text = str(delta.get("text", ""))
            self.parts[index].append(text)
            self.on_text(text)
        elif kind == "input_json_delta":
            self.parts[index].append(str(delta.get("partial_json", "")))
        elif kind == "thinking_delta" and block.get("type") == "thinking":
            self.parts[index].append(str(delta.get("thinking", "")))
        elif kind == "signature_delta" and block.get("type") == "thinking":
            block["signature"] = delta.get("signature")
        elif kind == "citations_delta" and block.get("type") == "text":
            block.setdefault("citations", []).append(delta.get("citation"))

    def response(self) -> LLMResponse:
        usage = Usage(**{name: int(self.usage.get(name) or 0) for name in _USAGE_KINDS})
        content = [_final_block(block, parts) for block, parts in zip(self.blocks, self.parts, strict=True)]
        return LLMResponse(
            content=content,
            stop_reason=self.stop_reason,
            usage=usage,
            model=str(self.message.get("model") or ""),
            message_id=str(self.message.get("id") or ""),
            cache_miss_reason=cache_miss_reason(self.message),
        )


def _final_block(block: dict[str, Any], parts: list[str]) -> dict[str, Any]:
    """The block as the response keeps it (the shape `_block_dict` gave the SDK's typed blocks)."""
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": str(block.get("text") or "") + "".join(parts)}
    if kind == "tool_use":
        return {
            "type": "tool_use",
            "id": block.get("id"),
            "name": block.get("name"),
            "input": _tool_input(block, parts),
        }
    if kind == "thinking":
        thinking = str(block.get("thinking") or "") + "".join(parts)
        return {"type": "thinking", "thinking": thinking, "signature": block.get("signature")}
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.get("data")}
    if parts and "input" in block:  # a server tool's call: its input streams as JSON too
        block = {**block, "input": _tool_input(block, parts)}
    kept: dict[str, Any] = _without_nones(block)
    return kept


def _tool_input(block: dict[str, Any], parts: list[str]) -> dict[str, Any]:
    """The tool call's input: its streamed JSON parsed (a stream cut inside it leaves what was complete: nothing),
    else the input it started with."""
    text = "".join(parts)
    if text:
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
        return {}
    start = block.get("input")
    return dict(start) if isinstance(start, dict) else {}


def _without_nones(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nones(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nones(v) for v in value]
    return value


def cache_miss_reason(message: dict[str, Any]) -> dict[str, Any] | None:
    """`diagnostics.cache_miss_reason` of the reply as plain data (`{"type": …, "cache_missed_input_tokens": …}`);
    None when the request asked for no diagnostics, nothing diverged, or the diagnosis was still pending."""
    diagnostics = message.get("diagnostics")
    reason = diagnostics.get("cache_miss_reason") if isinstance(diagnostics, dict) else None
    if not isinstance(reason, dict):
        return None
    kept: dict[str, Any] = _without_nones(reason)
    return kept
