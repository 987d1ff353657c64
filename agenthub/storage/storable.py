"""`storable`: a text with what a text column refuses (NUL, a lone surrogate) replaced, the same on every backend."""

from __future__ import annotations

import re

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(text: str) -> str:
    """`text` without what a text column refuses (PostgreSQL: NUL; UTF-8: a lone surrogate), each one U+FFFD, so a
    text holding one (a message, a display name) is stored like the rest on every backend instead of failing its
    write."""
    return _UNSTORABLE.sub("\ufffd", text)
