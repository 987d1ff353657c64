"""The reply built from a stream's events: half a UTF-16 pair in a text piece (a vendor's JSON can escape one, and a
server that slices UTF-16 splits a pair between two pieces) arrives joined when its other half follows, else as
U+FFFD; the pieces handed on add up to the final text either way."""

from __future__ import annotations

from typing import Any

from agenthub.llm.reply import ReplyBuilder


def _built(*pieces: str) -> tuple[str, list[str]]:
    """The final text, and the pieces handed on, of a text block streamed as `pieces`."""
    handed: list[str] = []
    builder = ReplyBuilder(handed.append)
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "m1", "model": "m", "usage": {"input_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}} for p in pieces),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}},
    ]
    for event in events:
        builder.take(event)
    return builder.response().text, handed


def test_a_pair_split_between_two_pieces_arrives_as_its_character() -> None:
    text, handed = _built("a \ud83d", "\ude00 b")
    assert text == "a \U0001f600 b"
    assert "".join(handed) == text


def test_a_lone_half_arrives_as_u_fffd_in_the_pieces_and_the_text() -> None:
    text, handed = _built("a \ud800 b", " c \udc00", "d")
    assert text == "a \ufffd b c \ufffdd"
    assert "".join(handed) == text
    for piece in handed:
        piece.encode("utf-8")  # every piece can be sent (a WeCom frame, a Feishu card, an SSE event)


def test_a_high_half_at_the_end_of_the_stream_arrives_as_u_fffd() -> None:
    text, handed = _built("a", "b \ud83d")
    assert text == "ab \ufffd"
    assert "".join(handed) == text


def test_text_without_surrogates_is_handed_on_piece_by_piece_unchanged() -> None:
    text, handed = _built("你好，", "world ", "😀")
    assert handed == ["你好，", "world ", "😀"]
    assert text == "你好，world 😀"
