"""The offline token estimate: one token per wide (CJK) character and per four others, whatever the text."""

from __future__ import annotations

import json

import pytest

from agenthub.llm.tokens import IMAGE_TOKENS, estimate_text_tokens, estimate_tokens


def _by_character(text: str) -> int:
    """The estimate's definition, character by character."""
    wide_ranges = ((0x2E80, 0x9FFF), (0xAC00, 0xD7AF), (0xF900, 0xFAFF), (0x20000, 0x10FFFF))
    wide = sum(1 for ch in text if any(low <= ord(ch) <= high for low, high in wide_ranges))
    return wide + -(-(len(text) - wide) // 4)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "a",
        "turn 0",
        "hello world, how are you?",
        "你好，世界",
        "mixed 中文 and English 한국어 text",
        "edges \u2e7f\u2e80\u9fff\ua000\uabff\uac00\ud7af\ud7b0\uf8ff\uf900\ufaff\ufb00",
        "beyond the BMP \U0001f600 \U00020000 \U0002a6d6 \U0010ffff",
        "ü é ß – “quotes” …",
    ],
)
def test_the_estimate_counts_each_wide_character_and_a_quarter_of_the_others(text: str) -> None:
    assert estimate_text_tokens(text) == _by_character(text)


def test_a_value_is_estimated_as_its_compact_json() -> None:
    value = [{"role": "user", "content": "你好 there"}, {"role": "assistant", "content": [{"type": "text"}]}]
    assert estimate_tokens(value) == _by_character(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    assert estimate_tokens([]) == 1  # "[]": what a session without history adds


def test_an_inline_image_counts_as_image_tokens_not_its_data() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * 100_000}}
    plain = json.dumps([{"type": "image"}], ensure_ascii=False, separators=(",", ":"))
    assert estimate_tokens([image]) == _by_character(plain) + IMAGE_TOKENS
