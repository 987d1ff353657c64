"""The Anthropic SDK's side of one call: the request body, the streamed call, the reply.

Imported on first use (the SDK takes seconds to import; `AnthropicProvider` loads this module off the event loop).
The body is encoded here, the parts a chat repeats once: our requests are plain JSON-ready dicts already, and the
SDK would otherwise copy the whole tree (`_utils/_prepare.py: copy_tree`, one Python step per value) on every call.
The call goes out on the SDK's client as the SDK prepared it (`MessagesWire`), and the events are read from the
bytes (`EventSplitter`) into plain dicts (`ReplyBuilder`): nothing is kept that the response does not hold.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2

from agenthub.errors import LLMError
from agenthub.i18n import Text
from agenthub.jsonsafe import utf8_replacing
from agenthub.llm.identity import ByIdentity, PerChat, Repeated
from agenthub.llm.reply import ReplyBuilder
from agenthub.llm.sdk_wire import MessagesWire
from agenthub.llm.sse_events import EventSplitter, SSEvent
from agenthub.llm.types import LLMRequest, LLMResponse, TextCallback

__all__ = ["MessagesWire", "request_body", "stream"]

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


def request_body(request: LLMRequest, diagnostics: dict[str, Any] | None = None) -> bytes:
    """The JSON body `messages.stream` would send for `request`; `diagnostics` (`{"previous_message_id": …}`) asks
    Anthropic's API why the prompt cache could not reuse that reply's prefix. The parts a chat's calls repeat (the
    same system blocks, tool definitions and earlier messages: objects never changed in place) are encoded once."""
    if request.chat:
        encoded: bytes | bytearray = _encoded_messages(request.chat).joined_for(request.messages)
    else:
        encoded = b",".join(map(_encoded, request.messages))
    parts = [f'{{"max_tokens":{_encode(request.max_tokens)},"messages":['.encode(), encoded]
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
    return utf8_replacing(_encode(value))


_encoded_blocks = ByIdentity(_encoded)
"""The system blocks and tool definitions, which the context builder hands as the same lists while unchanged."""


class EncodedMessages(Repeated[dict[str, Any], bytes]):
    """A chat's previous request's messages, each one's JSON, and all of it joined by commas in one buffer kept
    from call to call: a call that repeats the messages (the same objects, never changed in place) encodes and
    copies into the buffer only what was appended, and the body is assembled from the buffer in one copy."""

    __slots__ = ("_ends", "_joined_of", "joined")

    def __init__(self) -> None:
        super().__init__(_encoded)
        self.joined = bytearray()
        self._ends: list[int] = []
        """Where each message's JSON ends in `joined`."""
        self._joined_of: list[bytes] = self.results
        """The encodings `joined` holds."""

    def joined_for(self, messages: list[dict[str, Any]]) -> bytearray:
        """`b",".join(encodings of messages)`, in the buffer (valid until the next call: copy it)."""
        synced = self.results is self._joined_of
        encoded = self._joined_of = self(messages)
        kept = self.kept if synced else 0
        joined, ends = self.joined, self._ends
        del ends[kept:]
        del joined[ends[-1] if ends else 0 :]
        for piece in encoded[kept:]:
            if ends:
                joined += b","
            joined += piece
            ends.append(len(joined))
        return joined


_encoded_messages = PerChat(EncodedMessages)


async def stream(
    client: MessagesWire,
    request: LLMRequest,
    on_text: TextCallback,
    diagnostics: dict[str, Any] | None = None,
) -> LLMResponse:
    """One streamed call, each text delta passed to `on_text` as it arrives. Raises the SDK's exceptions: its
    HTTP status errors, its `event: error` error, its timeout and connection errors."""
    response = await client.send(request_body(request, diagnostics), diagnostics is not None)
    reply, events = ReplyBuilder(on_text), EventSplitter()
    try:
        async for chunk in client.chunks(response):
            for event in events.feed(chunk):
                _take(client, response, reply, event)
        for event in events.close():
            _take(client, response, reply, event)
    finally:
        await response.aclose()
    if not reply.started:
        raise LLMError("stream ended before message_start", user_text=Text("llm.empty_reply"))
    return reply.response()


def _take(client: MessagesWire, response: httpx2.Response, reply: ReplyBuilder, event: SSEvent) -> None:
    """One event, as the SDK's `AsyncStream` reads it: `error` raises, `ping` and unnamed or empty events are
    skipped, any other is JSON."""
    name, data = event
    if name == b"error":
        raise client.stream_error(data, response)
    if not name or name == b"ping" or not data:
        return
    parsed = json.loads(data)
    if isinstance(parsed, dict):
        reply.take(parsed)
