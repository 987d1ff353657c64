"""JSON parsing for untrusted input (request bodies, webhooks, platform frames, files others may have written):
a text nested deeper than the parser goes (`[` × 100,000) raises ValueError like any other bad JSON, never
RecursionError, so every caller's `except ValueError` turns it into a clean refusal instead of a 500."""

from __future__ import annotations

import json
import re
from typing import Any

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
"""Half a surrogate pair, which UTF-8 cannot carry."""
_COMPACT = (",", ":")


class JSONTooDeepError(ValueError):
    """The text nests arrays or objects deeper than the parser can go."""


def loads(data: str | bytes | bytearray, *, strict: bool = True) -> Any:
    """`json.loads`, with RecursionError turned into `JSONTooDeepError` (a ValueError). Bytes are decoded as
    UTF-8 by `json.loads` itself (UnicodeDecodeError is a ValueError too)."""
    try:
        return json.loads(data, strict=strict)
    except RecursionError:
        raise JSONTooDeepError("JSON nested too deeply") from None


def utf8_dumps(value: object, *, allow_nan: bool = True, compact: bool = False) -> str:
    """JSON text as the replies are: UTF-8, non-ASCII as it is; a lone surrogate (which UTF-8 cannot carry: a
    platform's JSON may hold one, `"\\ud800"`) kept as its `\\ud800` escape, so the text is sent instead of failing.
    `compact`: no spaces after `,` and `:`."""
    separators = _COMPACT if compact else None
    text = json.dumps(value, ensure_ascii=False, allow_nan=allow_nan, separators=separators)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, allow_nan=allow_nan, separators=separators)
    return text


def without_lone_surrogates(text: str) -> str:
    """`text` with each lone surrogate as U+FFFD, and two that make one character (two pieces of a stream decoded
    apart, the first ending in its high half) as that character; the text itself when it holds none."""
    if not _LONE_SURROGATE.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def utf8_replacing(text: str) -> bytes:
    """`text` as UTF-8, a lone surrogate in it (a message stored before they were cleaned) as U+FFFD: sent to the
    model, where `str.encode` failed the whole call."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return without_lone_surrogates(text).encode()
