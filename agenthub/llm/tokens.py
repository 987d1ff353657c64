"""Offline token estimates: about one token per CJK character and per four other characters."""

from __future__ import annotations

import json
from typing import Any


def _is_wide(ch: str) -> bool:
    code = ord(ch)
    return 0x2E80 <= code <= 0x9FFF or 0xAC00 <= code <= 0xD7AF or 0xF900 <= code <= 0xFAFF or code >= 0x20000


def estimate_text_tokens(text: str) -> int:
    """Estimate the tokens of a string (0 for an empty one)."""
    if not text:
        return 0
    wide = sum(1 for ch in text if _is_wide(ch))
    return wide + -(-(len(text) - wide) // 4)


IMAGE_TOKENS = 1600
"""What one inline image costs: the vendor scales images to about 1.15 megapixels, about 1600 tokens."""


def estimate_tokens(value: Any) -> int:
    """Estimate the tokens of a string or any JSON-able value (system blocks, messages, tools); an inline
    (base64) image counts as `IMAGE_TOKENS`, never as the length of its data."""
    if value is None:
        return 0
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if isinstance(value, str) or '"type":"base64"' not in text:
        return estimate_text_tokens(text)
    images: list[int] = []
    plain = json.dumps(_without_inline_images(value, images), ensure_ascii=False, separators=(",", ":"))
    return estimate_text_tokens(plain) + IMAGE_TOKENS * len(images)


def _without_inline_images(value: Any, images: list[int]) -> Any:
    """A copy of `value` with each base64 image block's data left out (one entry in `images` per image)."""
    if isinstance(value, list):
        return [_without_inline_images(v, images) for v in value]
    if not isinstance(value, dict):
        return value
    source = value.get("source")
    if value.get("type") == "image" and isinstance(source, dict) and source.get("type") == "base64":
        images.append(1)
        return {"type": "image"}
    return {k: _without_inline_images(v, images) for k, v in value.items()}
