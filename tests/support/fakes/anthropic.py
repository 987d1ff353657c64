"""A fake Anthropic Messages API on 127.0.0.1: scripted JSON/SSE replies, injected faults, recorded requests.

Usage in tests (the `fake_llm` fixture starts one per test)::

    fake_llm.script(reply_text("hello there", chunks=3), rate_limited(retry_after_ms=1))
    client = AsyncAnthropic(base_url=fake_llm.base_url, api_key="test")
    ...
    assert fake_llm.requests[0].body["model"] == "m"

Replies come from a FIFO queue (`script`), then from `responder(body)` if set, then a deterministic default
("reply to: <last user text>"). With `prompt_cache=PromptCache()` usage reports cache reads and writes as
Anthropic's prompt cache would. Standalone (benchmarks): `async with FakeAnthropic(delta_delay_s=0.01) as fake:`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
import pytest_asyncio
from aiohttp import web

from agenthub.jsonsafe import utf8_dumps
from tests.support.fakes.prompt_cache import PromptCache

Fault = Literal["stream_error", "cut", "hang"]
Responder = Callable[[dict[str, Any]], "ScriptedReply | None"]
KeyOf = Callable[[dict[str, Any]], "str | None"]

_ERROR_STATUS_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@dataclass
class ScriptedReply:
    """One scripted response.

    `content` holds final-form blocks (`{"type": "text", "text": …}`, `{"type": "tool_use", "id", "name",
    "input": {…}}`); streaming splits each text into `chunks` text deltas and each tool input into `chunks`
    `input_json_delta` fragments. `status != 200` answers with an error body instead. `fault`:
    `stream_error` sends the content, then `event: error` (type `error_type`); `cut` sends the content and ends
    the stream without `message_delta`/`message_stop`; `hang` never answers until the client disconnects.
    `usage` keys override the server default; `stop_reason` defaults to `tool_use`/`end_turn` by content.
    `hold`: the reply waits for this event before anything else (set it once to release many replies together).
    """

    content: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None
    usage: dict[str, int] | None = None
    model: str | None = None
    chunks: int = 3
    first_byte_delay_s: float | None = None
    delta_delay_s: float | None = None
    status: int = 200
    error_type: str | None = None
    error_message: str = "error"
    headers: dict[str, str] = field(default_factory=dict)
    fault: Fault | None = None
    hold: asyncio.Event | None = None


def reply_text(text: str, **kw: Any) -> ScriptedReply:
    """A plain text reply (streamed in `chunks` deltas)."""
    return ScriptedReply(content=[{"type": "text", "text": text}], **kw)


def reply_tool(
    name: str, tool_input: dict[str, Any], *, text: str | None = None, tool_id: str | None = None, **kw: Any
) -> ScriptedReply:
    """A tool_use reply, optionally preceded by a text block."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks.append({"type": "tool_use", "id": tool_id or "", "name": name, "input": tool_input})
    return ScriptedReply(content=blocks, **kw)


def http_error(status: int, message: str = "error", *, error_type: str | None = None, **kw: Any) -> ScriptedReply:
    """An HTTP error response with the Anthropic error body."""
    kind = error_type or _ERROR_STATUS_TYPES.get(status, "api_error")
    return ScriptedReply(status=status, error_type=kind, error_message=message, **kw)


def rate_limited(*, retry_after_ms: int | None = None, retry_after_s: int | None = None) -> ScriptedReply:
    """A 429 rate_limit_error, optionally with `retry-after-ms` / `retry-after` headers."""
    headers = {}
    if retry_after_ms is not None:
        headers["retry-after-ms"] = str(retry_after_ms)
    if retry_after_s is not None:
        headers["retry-after"] = str(retry_after_s)
    return http_error(429, "Rate limited", headers=headers)


def overloaded() -> ScriptedReply:
    """A 529 overloaded_error."""
    return http_error(529, "Overloaded")


def server_error(status: int = 500) -> ScriptedReply:
    """A 5xx api_error."""
    return http_error(status, "Internal server error", error_type="api_error")


def prompt_too_long(tokens: int = 208656, maximum: int = 200000) -> ScriptedReply:
    """The 400 context-overflow error Anthropic returns."""
    return http_error(400, f"prompt is too long: {tokens} tokens > {maximum} maximum")


def midstream_error(after_text: str = "", error_type: str = "overloaded_error", **kw: Any) -> ScriptedReply:
    """A 200 stream that sends `after_text` (if any) and then an `event: error`."""
    content = [{"type": "text", "text": after_text}] if after_text else []
    return ScriptedReply(content=content, fault="stream_error", error_type=error_type, error_message="Overloaded", **kw)


def cut_stream(after_text: str = "partial", **kw: Any) -> ScriptedReply:
    """A 200 stream that ends without `message_stop` after sending `after_text`."""
    return ScriptedReply(content=[{"type": "text", "text": after_text}], fault="cut", **kw)


def hang() -> ScriptedReply:
    """A response that never starts; the handler waits until the client disconnects."""
    return ScriptedReply(fault="hang")


@dataclass
class RecordedRequest:
    """One request the fake received; `disconnected` is set when the client dropped it before completion."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)
    completed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def stream(self) -> bool:
        return bool(self.body and self.body.get("stream"))

    @property
    def was_disconnected(self) -> bool:
        return self.disconnected.is_set()


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the last user message of a Messages API body ("" if none)."""
    for message in reversed(body.get("messages") or []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        texts = [b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]
        if texts:
            return "".join(texts)
    return ""


def estimate_tokens(value: Any) -> int:
    """A rough, deterministic token estimate (about four characters per token, at least one)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return max(1, len(text) // 4)


def _split(text: str, parts: int) -> list[str]:
    if not text:
        return [""]
    parts = max(1, min(parts, len(text)))
    size = -(-len(text) // parts)
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _sse(event: str, data: dict[str, Any]) -> bytes:
    """One event; a lone surrogate in a scripted text goes as its `\\ud800` escape, as a vendor's JSON would."""
    return f"event: {event}\ndata: {utf8_dumps(data)}\n\n".encode()


class FakeAnthropic:
    """The fake server; see the module docstring. Counters: `max_in_flight`, `in_flight`, `requests`; with
    `key_of` (a request body → its key, e.g. the session it is for, or None), the same per key: `calls_by`,
    `in_flight_by`, `max_in_flight_by`."""

    def __init__(
        self,
        *,
        default_usage: dict[str, int] | None = None,
        first_byte_delay_s: float = 0.0,
        delta_delay_s: float = 0.0,
        responder: Responder | None = None,
        key_of: KeyOf | None = None,
        prompt_cache: PromptCache | None = None,
    ) -> None:
        self.prompt_cache = prompt_cache
        """When set, replies report cache reads and writes as Anthropic's prompt cache would (and answer
        `diagnostics`); a scripted reply's own `usage` keys still win."""
        self.default_usage = dict(default_usage or {})
        self.first_byte_delay_s = first_byte_delay_s
        self.delta_delay_s = delta_delay_s
        self.responder = responder
        self.key_of = key_of
        self.requests: list[RecordedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.calls_by: Counter[str] = Counter()
        self.in_flight_by: Counter[str] = Counter()
        self.max_in_flight_by: Counter[str] = Counter()
        self._queue: deque[ScriptedReply] = deque()
        self._ids = itertools.count(1)
        self._closing = asyncio.Event()
        self._arrived = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.busy_s = 0.0
        """Time spent on the vendor's side of the requests in this process: parsing each body and building its
        reply (the usage estimated over the whole prompt). A benchmark that runs the fake beside the daemon takes
        it off the turn to tell the daemon's own share."""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, *replies: ScriptedReply) -> None:
        """Queue replies; each request takes the next one."""
        self._queue.extend(replies)

    @property
    def pending(self) -> int:
        """Scripted replies not yet consumed."""
        return len(self._queue)

    def message_requests(self) -> list[RecordedRequest]:
        """Recorded `POST /v1/messages` requests (excluding count_tokens)."""
        return [r for r in self.requests if r.path.endswith("/v1/messages")]

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeAnthropic:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _record(self, request: web.Request) -> RecordedRequest:
        raw = await request.read()
        began = time.perf_counter()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        self.busy_s += time.perf_counter() - began
        rec = RecordedRequest(request.method, request.path, {k.lower(): v for k, v in request.headers.items()}, body)
        self.requests.append(rec)
        async with self._arrived:
            self._arrived.notify_all()
        return rec

    async def wait_for_requests(self, count: int, timeout_s: float = 5.0) -> list[RecordedRequest]:
        """Wait until at least `count` requests arrived (any path); `TimeoutError` after `timeout_s`."""
        async with asyncio.timeout(timeout_s), self._arrived:
            await self._arrived.wait_for(lambda: len(self.requests) >= count)
        return self.requests[:count]

    def _next_reply(self, body: dict[str, Any]) -> ScriptedReply:
        if self._queue:
            return self._queue.popleft()
        if self.responder is not None and (reply := self.responder(body)) is not None:
            return reply
        return reply_text(f"reply to: {last_user_text(body)}")

    async def _count_tokens(self, request: web.Request) -> web.Response:
        rec = await self._record(request)
        body = rec.body or {}
        began = time.perf_counter()
        total = estimate_tokens([body.get("system"), body.get("messages"), body.get("tools")])
        self.busy_s += time.perf_counter() - began
        rec.completed.set()
        return web.json_response({"input_tokens": total})

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        rec = await self._record(request)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        key = self._count_in(rec.body)
        try:
            body = rec.body
            if not isinstance(body, dict) or "messages" not in body or "model" not in body:
                return _error_response(400, "invalid_request_error", "body must be JSON with model and messages")
            reply = self._next_reply(body)
            response = await self._respond(request, body, reply)
            rec.completed.set()
            return response
        except (asyncio.CancelledError, ConnectionResetError):
            rec.disconnected.set()
            raise
        finally:
            self.in_flight -= 1
            if key is not None:
                self.in_flight_by[key] -= 1

    def _count_in(self, body: dict[str, Any] | None) -> str | None:
        """The request's key (`key_of`), counted as a call and as in flight; None when not keyed."""
        key = self.key_of(body) if self.key_of is not None and isinstance(body, dict) else None
        if key is not None:
            self.calls_by[key] += 1
            self.in_flight_by[key] += 1
            self.max_in_flight_by[key] = max(self.max_in_flight_by[key], self.in_flight_by[key])
        return key

    async def _respond(self, request: web.Request, body: dict[str, Any], reply: ScriptedReply) -> web.StreamResponse:
        if reply.hold is not None:
            await reply.hold.wait()
        if reply.fault == "hang":
            await self._closing.wait()
            return _error_response(503, "api_error", "server stopping")
        if reply.hold is not None:
            await reply.hold.wait()
        await self._pause(reply.first_byte_delay_s, self.first_byte_delay_s)
        if reply.status != 200:
            return _error_response(reply.status, reply.error_type or "api_error", reply.error_message, reply.headers)
        began = time.perf_counter()
        message = self._message(body, reply)
        self.busy_s += time.perf_counter() - began
        if not body.get("stream"):
            if reply.fault == "stream_error":
                return _error_response(529, reply.error_type or "api_error", reply.error_message)
            return web.json_response(message, headers={"request-id": f"req_{message['id']}"})
        return await self._stream(request, message, reply)

    def _message(self, body: dict[str, Any], reply: ScriptedReply) -> dict[str, Any]:
        number = next(self._ids)
        content = []
        for i, block in enumerate(reply.content):
            if block.get("type") == "tool_use" and not block.get("id"):
                block = {**block, "id": f"toolu_{number:04d}_{i}"}
            content.append(block)
        stop = reply.stop_reason
        if stop is None and reply.fault is None:
            stop = "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end_turn"
        usage = {
            "input_tokens": estimate_tokens([body.get("system"), body.get("messages")]),
            "output_tokens": estimate_tokens(content),
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
            **self.default_usage,
            **(self.prompt_cache.usage(body) if self.prompt_cache is not None else {}),
            **(reply.usage or {}),
        }
        diagnostics = self.prompt_cache.diagnose(body, f"msg_{number:06d}") if self.prompt_cache is not None else None
        return {
            **({"diagnostics": diagnostics} if diagnostics is not None else {}),
            "id": f"msg_{number:06d}",
            "type": "message",
            "role": "assistant",
            "model": reply.model or body.get("model", "fake-model"),
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }

    async def _stream(self, request: web.Request, message: dict[str, Any], reply: ScriptedReply) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "request-id": f"req_{message['id']}"}
        )
        await response.prepare(request)
        usage = message["usage"]
        start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
        await response.write(_sse("message_start", {"type": "message_start", "message": start}))
        await response.write(_sse("ping", {"type": "ping"}))
        for index, block in enumerate(message["content"]):
            for chunk in _block_events(index, block, reply.chunks):
                await response.write(chunk)
                await self._pause(reply.delta_delay_s, self.delta_delay_s)
        if reply.fault == "stream_error":
            error = {"type": reply.error_type or "api_error", "message": reply.error_message}
            await response.write(_sse("error", {"type": "error", "error": error}))
        elif reply.fault != "cut":
            delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
            final_usage = {"output_tokens": usage["output_tokens"]}
            for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
                if reply.usage and key in reply.usage:
                    final_usage[key] = usage[key]
            await response.write(_sse("message_delta", {"type": "message_delta", "delta": delta, "usage": final_usage}))
            await response.write(_sse("message_stop", {"type": "message_stop"}))
        await response.write_eof()
        return response

    async def _pause(self, specific: float | None, default: float) -> None:
        await asyncio.sleep(default if specific is None else specific)


def _block_events(index: int, block: dict[str, Any], chunks: int) -> list[bytes]:
    head, deltas = block, []
    if block.get("type") == "text":
        head = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in _split(block["text"], chunks)]
    elif block.get("type") == "tool_use":
        head = {**block, "input": {}}
        arguments = json.dumps(block["input"], ensure_ascii=False)
        deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in _split(arguments, chunks)]
    out = [_sse("content_block_start", {"type": "content_block_start", "index": index, "content_block": head})]
    out += [_sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas]
    out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    return out


def _error_response(status: int, error_type: str, message: str, headers: dict[str, str] | None = None) -> web.Response:
    body = {"type": "error", "error": {"type": error_type, "message": message}, "request_id": "req_fake"}
    return web.json_response(body, status=status, headers={"request-id": "req_fake", **(headers or {})})


@pytest_asyncio.fixture
async def fake_llm(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeAnthropic]:
    """A started `FakeAnthropic` with a clean environment (no `ANTHROPIC_*`, loopback not proxied)."""
    for name in list(os.environ):
        if name.startswith("ANTHROPIC_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    async with FakeAnthropic() as fake:
        yield fake
