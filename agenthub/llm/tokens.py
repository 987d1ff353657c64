"""Offline token estimates: about one token per CJK character and per four other characters."""

from __future__ import annotations

import json
import re
from typing import Any

_WIDE = re.compile("[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0010ffff]+")
"""Runs of wide (CJK) characters: about one token each."""
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""`json.dumps(..., ensure_ascii=False, separators=(",", ":"))` without a new encoder per call."""


def estimate_text_tokens(text: str) -> int:
    """Estimate the tokens of a string (0 for an empty one). A turn's estimate is budgets' work: counted with the
    gate's CPU, so it stays in C (no Python step per character)."""
    if not text:
        return 0
    wide = 0 if text.isascii() else sum(map(len, _WIDE.findall(text)))
    return wide + -(-(len(text) - wide) // 4)


IMAGE_TOKENS = 1600
"""What one inline image costs: the vendor scales images to about 1.15 megapixels, about 1600 tokens."""


def estimate_tokens(value: Any) -> int:
    """Estimate the tokens of a string or any JSON-able value (system blocks, messages, tools); an inline
    (base64) image counts as `IMAGE_TOKENS`, never as the length of its data."""
    if value is None:
        return 0
    if not value and isinstance(value, list):  # `[]` (a session without history): its two brackets
        return 1
    text = value if isinstance(value, str) else _COMPACT.encode(value)
    if isinstance(value, str) or '"type":"base64"' not in text:
        return estimate_text_tokens(text)
    images: list[int] = []
    plain = _COMPACT.encode(_without_inline_images(value, images))
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
