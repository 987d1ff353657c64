"""The one SSE codec of the HTTP API: reply events to `text/event-stream` frames and back (server and client)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from agenthub.jsonsafe import utf8_dumps
from agenthub.messages import (
    DeltaEvent,
    DoneEvent,
    ErrorCode,
    ErrorEvent,
    NoticeEvent,
    ReplyEvent,
    ToolEvent,
    Usage,
)

MAX_FRAME_BYTES = 16 * 1024 * 1024
"""A frame longer than this (a peer that never ends one) is malformed, not buffered without bound."""
_USAGE_FIELDS = frozenset(Usage().as_dict())


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded SSE frame: its `event:` name and its `data:` JSON object."""

    event: str
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class MalformedFrame:
    """A frame that could not be decoded; `reason` says why (safe to log, never the peer's text)."""

    reason: str


def encode_frame(event: str, data: Mapping[str, Any]) -> bytes:
    """One SSE frame: `event: <name>`, one `data:` line of JSON (non-ASCII kept as is), a blank line."""
    return f"event: {event}\ndata: {utf8_dumps(data)}\n\n".encode()


KEEPALIVE = b": keepalive\n\n"
"""An SSE comment: keeps an idle feed's connection open; decoders skip it."""


def reply_text(done: DoneEvent) -> str:
    """What an HTTP client gets as the reply: for a request answered together with later ones (`joined`), the
    same joined answer the newest request gets (every request carries the answer; usage is on the newest)."""
    return done.answer if done.joined else done.full_text


def joined_field(done: DoneEvent) -> dict[str, Any]:
    return {"joined": True} if done.joined else {}


def encode_event(event: ReplyEvent) -> bytes:
    """One reply event as an SSE frame (design §9: delta, then done or error; tool and notice are extras)."""
    if isinstance(event, DeltaEvent):
        return encode_frame("delta", {"text": event.text})
    if isinstance(event, DoneEvent):
        done = {"full_text": reply_text(event), "usage": event.usage.as_dict(), **joined_field(event)}
        return encode_frame("done", done)
    if isinstance(event, ErrorEvent):
        return encode_frame("error", {"message": event.message, "code": event.code})
    if isinstance(event, ToolEvent):
        return encode_frame("tool", {"name": event.name, "phase": event.phase, "is_error": event.is_error})
    return encode_frame("notice", {"text": event.text})


class FrameDecoder:
    """Turns a byte stream, cut anywhere (mid-line, mid-character), into frames; feed it chunks as they come."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[Frame | MalformedFrame]:
        """The frames `chunk` completes, in order; a malformed one is reported in its place, the others go on."""
        joined = (self._buffer + chunk).replace(b"\r\n", b"\n")  # a CR held back meets its LF here
        *complete, self._buffer = joined.split(b"\n\n")
        frames = [decoded for block in complete if (decoded := decode_block(block)) is not None]
        if len(self._buffer) > MAX_FRAME_BYTES:
            self._buffer = b""
            frames.append(MalformedFrame(f"a frame longer than {MAX_FRAME_BYTES} bytes"))
        return frames

    def close(self) -> list[Frame | MalformedFrame]:
        """At the end of the stream: a last frame without its blank line still counts (the data is whole)."""
        rest, self._buffer = self._buffer, b""
        decoded = decode_block(rest) if rest.strip() else None
        return [decoded] if decoded is not None else []


def decode_block(block: bytes) -> Frame | MalformedFrame | None:
    """One frame's lines (without the blank line ending it); None for a comment-only block (a keepalive)."""
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError:
        return MalformedFrame("a frame that is not UTF-8")
    event, data_lines = "message", []
    for line in text.split("\n"):
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            event = value
        elif field == "data":
            data_lines.append(value)
    if not data_lines:
        return None
    try:
        data = json.loads("\n".join(data_lines))
    except (ValueError, RecursionError):
        return MalformedFrame(f"a {event!r} frame whose data is not JSON")
    if not isinstance(data, dict):
        return MalformedFrame(f"a {event!r} frame whose data is not an object")
    return Frame(event, data)


async def read_frames(chunks: AsyncIterable[bytes]) -> AsyncIterator[Frame | MalformedFrame]:
    """Every frame of a byte stream (e.g. `response.content.iter_any()`), then whatever its end completes."""
    decoder = FrameDecoder()
    async for chunk in chunks:
        for frame in decoder.feed(chunk):
            yield frame
    for frame in decoder.close():
        yield frame


def decode_event(frame: Frame) -> ReplyEvent | MalformedFrame | None:
    """A chat frame as its reply event; None for an event name this client does not know (a newer daemon)."""
    try:
        return _event_of(frame.event, frame.data)
    except (TypeError, ValueError, OverflowError):
        return MalformedFrame(f"a {frame.event!r} frame with fields of the wrong type")


def _event_of(name: str, data: dict[str, Any]) -> ReplyEvent | None:
    if name == "delta":
        return DeltaEvent(_text(data, "text"))
    if name == "done":
        return DoneEvent(_text(data, "full_text"), _usage(data.get("usage")))  # full_text is already the answer
    if name == "error":
        return ErrorEvent(_text(data, "message"), code=_text(data, "code") or ErrorCode.ERROR)
    if name == "tool":
        ended = data.get("phase") == "end"
        return ToolEvent(_text(data, "name") or "?", "end" if ended else "start", is_error=data.get("is_error") is True)
    if name == "notice":
        return NoticeEvent(_text(data, "text"))
    return None


def _text(data: dict[str, Any], key: str) -> str:
    value = data.get(key, "")
    if not isinstance(value, str):
        raise TypeError(f"{key} is not a string")
    return value


def _usage(raw: object) -> Usage:
    if raw is None:
        return Usage()
    if not isinstance(raw, dict):
        raise TypeError("usage is not an object")
    counts = {k: v for k, v in raw.items() if k in _USAGE_FIELDS}
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts.values()):
        raise ValueError("a usage count is not a non-negative integer")
    return Usage(**counts)
