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


def estimate_tokens(value: Any) -> int:
    """Estimate the tokens of a string or any JSON-able value (system blocks, messages, tools)."""
    if value is None:
        return 0
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return estimate_text_tokens(text)
