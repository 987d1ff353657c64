"""The server-sent events of a streamed Messages API reply, cut from its bytes as they arrive.

Each event comes out as its `event:` name and its `data:` text, read as the SDK's `SSEDecoder` reads them: a line
ends in LF, CRLF or CR, a line starting with `:` is a comment, `data:` lines join with LF, one space after the colon
is dropped, and an event counts once a blank line ends it (one the stream ends inside is dropped). The SDK builds a
string and an object per line and per event; here each event is a pair of byte strings, split at C speed.
"""

from __future__ import annotations

__all__ = ["EventSplitter", "SSEvent"]

SSEvent = tuple[bytes, bytes]
"""`(name, data)`; `name` is b"" for an event that named none."""

_CR, _LF = b"\r", b"\n"


class EventSplitter:
    """Feed it the body's chunks, cut anywhere, in order; it gives back each event they complete."""

    __slots__ = ("_rest",)

    def __init__(self) -> None:
        self._rest = b""
        """What came after the last complete event (its line endings already made LF), plus a CR held back."""

    def feed(self, chunk: bytes) -> list[SSEvent]:
        """The events `chunk` completes, in order."""
        buffer = self._rest + chunk if self._rest else chunk
        held = b""
        if _CR in buffer:
            if buffer.endswith(_CR):  # a CRLF's CR whose LF the next chunk may bring
                buffer, held = buffer[:-1], _CR
            buffer = _as_lf(buffer)
        *blocks, rest = buffer.split(b"\n\n")
        self._rest = rest + held
        return [event for block in blocks if (event := _event(block)) is not None]

    def close(self) -> list[SSEvent]:
        """At the end of the body: the events a CR held back completes (a stream whose lines end in CR alone)."""
        rest, self._rest = self._rest, b""
        if not rest.endswith(_CR):
            return []
        *blocks, _ = _as_lf(rest).split(b"\n\n")
        return [event for block in blocks if (event := _event(block)) is not None]


def _as_lf(data: bytes) -> bytes:
    return data.replace(b"\r\n", _LF).replace(_CR, _LF)


def _event(block: bytes) -> SSEvent | None:
    """The event one block of lines (its blank line cut off) makes; None when it has neither a name nor data (the
    SDK's stream skips such an event)."""
    name, data = b"", []
    for line in block.split(_LF):
        if not line or line.startswith(b":"):
            continue
        field, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if field == b"data":
            data.append(value)
        elif field == b"event":
            name = value
    joined = b"\n".join(data)
    return (name, joined) if name or joined else None
