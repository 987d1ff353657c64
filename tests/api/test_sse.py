"""The API's one SSE codec: what the server encodes, the client decodes to the same events, however it is cut."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agenthub.api.sse import (
    MAX_FRAME_BYTES,
    Frame,
    FrameDecoder,
    MalformedFrame,
    decode_event,
    encode_event,
    encode_frame,
    read_frames,
)
from agenthub.messages import DeltaEvent, DoneEvent, ErrorEvent, NoticeEvent, ReplyEvent, ToolEvent, Usage

EVENTS: list[ReplyEvent] = [
    DeltaEvent("Hello, 世界 👋"),
    DeltaEvent("line one\nline two\r\n\n\nafter blank lines"),
    ToolEvent("web_search", "start"),
    ToolEvent("web_search", "end"),
    ToolEvent("read_memory", "end", is_error=True),
    NoticeEvent("已排队：前面还有 1 条消息"),
    DoneEvent("全部完成 ✅", Usage(12, 34, 5, 6)),
    DoneEvent(""),
    ErrorEvent("模型暂时不可用", code="llm_error"),
    ErrorEvent("stopped by /stop", code="stopped"),
]


def _decoded(frames: list[Frame | MalformedFrame]) -> list[ReplyEvent | MalformedFrame | None]:
    return [decode_event(f) if isinstance(f, Frame) else f for f in frames]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_every_reply_event_survives_the_round_trip(event: ReplyEvent) -> None:
    assert _decoded(FrameDecoder().feed(encode_event(event))) == [event]


def test_a_joined_reply_decodes_to_the_answer_every_request_carries() -> None:
    joined = DoneEvent("(answered together with your next message)", Usage(1, 2), joined=True, answer="the answer")
    assert _decoded(FrameDecoder().feed(encode_event(joined))) == [DoneEvent("the answer", Usage(1, 2))]


def test_a_stream_cut_at_every_byte_decodes_to_the_same_events() -> None:
    stream = b"".join(encode_event(e) for e in EVENTS)
    for cut in range(1, len(stream)):
        decoder = FrameDecoder()
        frames = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:]) + decoder.close()
        assert _decoded(frames) == EVENTS, f"cut at byte {cut}"


def test_one_byte_chunks_and_crlf_line_ends_decode_too() -> None:
    stream = b"".join(encode_event(e) for e in EVENTS).replace(b"\n", b"\r\n")
    decoder = FrameDecoder()
    frames = [f for i in range(len(stream)) for f in decoder.feed(stream[i : i + 1])]
    assert _decoded(frames) == EVENTS


def test_keepalive_comments_and_multi_line_data_follow_the_sse_rules() -> None:
    stream = b': keepalive\n\nevent: delta\ndata: {"text":\ndata: "a"}\n\n: keepalive\n\n'
    assert _decoded(FrameDecoder().feed(stream)) == [DeltaEvent("a")]


def test_a_malformed_frame_is_reported_in_its_place_and_nothing_around_it_is_lost() -> None:
    stream = (
        encode_event(DeltaEvent("before"))
        + b"event: delta\ndata: {not json\n\n"
        + b"event: delta\ndata: \xff\xfe\n\n"
        + b"event: delta\ndata: [1, 2]\n\n"
        + encode_frame("done", {"full_text": "x", "usage": {"input_tokens": "many"}})
        + encode_frame("delta", {"text": 42})
        + encode_event(DeltaEvent("after"))
    )
    decoded = _decoded(FrameDecoder().feed(stream))
    assert decoded[0] == DeltaEvent("before") and decoded[-1] == DeltaEvent("after")
    middle = decoded[1:-1]
    assert len(middle) == 5 and all(isinstance(m, MalformedFrame) for m in middle)
    reasons = [m.reason for m in middle if isinstance(m, MalformedFrame)]
    assert "not JSON" in reasons[0] and "not UTF-8" in reasons[1] and "not an object" in reasons[2]
    assert all("wrong type" in r for r in reasons[3:])
    assert not any("not json" in r or "many" in r for r in reasons), "the peer's text is never echoed"


def test_an_unknown_event_name_is_skipped_not_an_error() -> None:
    assert _decoded(FrameDecoder().feed(encode_frame("progress", {"percent": 50}))) == [None]


def test_a_frame_that_never_ends_is_malformed_not_buffered_forever() -> None:
    decoder = FrameDecoder()
    frames = decoder.feed(b"event: delta\ndata: " + b"x" * (MAX_FRAME_BYTES + 1))
    assert len(frames) == 1 and isinstance(frames[0], MalformedFrame)
    assert _decoded(decoder.feed(encode_event(DeltaEvent("next")))) == [DeltaEvent("next")]


async def test_read_frames_yields_a_last_frame_whose_blank_line_never_came() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield encode_event(DeltaEvent("a"))[:5]
        yield encode_event(DeltaEvent("a"))[5:]
        yield encode_event(DoneEvent("a")).rstrip(b"\n")

    frames = [f async for f in read_frames(chunks())]
    assert _decoded(frames) == [DeltaEvent("a"), DoneEvent("a")]
