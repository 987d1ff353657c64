"""The event splitter gives the events the SDK's own `SSEDecoder` finds in the same body, however it is cut."""

from __future__ import annotations

from anthropic._streaming import SSEDecoder
from hypothesis import given, settings
from hypothesis import strategies as st

from agenthub.llm.sse_events import EventSplitter, SSEvent

ENDINGS = st.sampled_from(["\n", "\r\n", "\r"])
NAMES = st.sampled_from(["", "message_start", "content_block_delta", "ping", "error"])
TEXT = st.text(alphabet=st.sampled_from(list('ab :{}"你\\')), max_size=12)


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """A stream of events (names, several `data:` lines, comments, ids, no space after the colon), each line
    ended by LF, CRLF or CR, sometimes ended inside its last event."""
    lines: list[str] = []
    for _ in range(draw(st.integers(0, 5))):
        if name := draw(NAMES):
            lines.append(f"event: {name}")
        for data in draw(st.lists(TEXT, max_size=3)):
            lines.append(draw(st.sampled_from(["data: ", "data:"])) + data)
        if draw(st.booleans()):
            lines.append(draw(st.sampled_from([": keepalive", "id: 7", "retry: 10", "other: x"])))
        lines.append("")
    if draw(st.booleans()):
        lines.append(f"data: {draw(TEXT)}")  # the stream ends inside an event
    return "".join(line + draw(ENDINGS) for line in lines).encode()


def sdk_events(body: bytes) -> list[SSEvent]:
    """What the SDK's decoder finds in the whole body at once, as (name, data), leaving out the events that carry
    neither (an `id:` or `retry:` alone), which its stream skips too."""
    found = [(sse.event or "", sse.data) for sse in SSEDecoder().iter_bytes(iter([body]))]
    return [(name.encode(), data.encode()) for name, data in found if name or data]


def split_events(body: bytes, cuts: list[int]) -> list[SSEvent]:
    splitter, events, start = EventSplitter(), [], 0
    for cut in [*sorted(cuts), len(body)]:
        events += splitter.feed(body[start:cut])
        start = cut
    return events + splitter.close()


@settings(max_examples=400, deadline=None)
@given(body=bodies(), data=st.data())
def test_any_cut_of_any_body_gives_the_sdks_events(body: bytes, data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=6))
    assert split_events(body, cuts) == sdk_events(body)


def test_a_crlf_cut_between_its_cr_and_lf_ends_one_line() -> None:
    body = b"event: ping\r\ndata: {}\r\n\r\nevent: message_stop\r\ndata: {}\r\n\r\n"
    cut = body.index(b"\r\n\r\n") + 1
    assert split_events(body, [cut, cut + 2]) == [(b"ping", b"{}"), (b"message_stop", b"{}")]


def test_an_event_the_stream_ends_inside_is_dropped() -> None:
    assert split_events(b"event: a\ndata: 1\n\nevent: b\ndata: 2\n", []) == [(b"a", b"1")]


def test_lines_ended_by_cr_alone_end_their_last_event_with_the_stream() -> None:
    assert split_events(b"event: a\rdata: 1\r\r", [len(b"event: a\rdata: 1\r")]) == [(b"a", b"1")]
