"""Text shaping for WeCom: byte-bounded splitting, markdown stripping, @mention removal."""

from __future__ import annotations

import re

# Strongest break first; a break is used when it falls in the back half of the window.
_BREAKS = ("\n\n", "\n", "。", "！", "？", "；", ". ", "! ", "? ", "; ", "，", ", ", " ")


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def _fitting_prefix_len(text: str, limit: int) -> int:
    """How many characters of `text` fit in `limit` UTF-8 bytes (never cutting a character)."""
    return len(text.encode("utf-8")[:limit].decode("utf-8", "ignore"))


def split_utf8(text: str, limit: int) -> list[str]:
    """Split into ordered parts of at most `limit` UTF-8 bytes, preferring paragraph, line, sentence breaks.

    `"".join(parts) == text` always holds.
    """
    if limit < 4:
        raise ValueError("limit must hold at least one UTF-8 character")
    parts: list[str] = []
    rest = text
    while utf8_len(rest) > limit:
        cut = _fitting_prefix_len(rest, limit)
        window = rest[:cut]
        for sep in _BREAKS:
            end = window.rfind(sep) + len(sep)
            if end > cut // 2 and end >= len(sep):
                cut = end
                break
        parts.append(rest[:cut])
        rest = rest[cut:]
    if rest:
        parts.append(rest)
    return parts


_FENCE = re.compile(r"^\s*```.*$\n?", re.MULTILINE)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+", re.MULTILINE)
_BULLET = re.compile(r"^(\s*)[-*+]\s+", re.MULTILINE)
_EMPHASIS = re.compile(r"(\*\*|__)(.+?)\1")
_CODE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\[([^\]\n]+)\]\((\S+?)\)")


def strip_markdown(text: str) -> str:
    """Turn markdown into readable plain text for clients that do not render it (the WeChat plugin)."""
    text = _FENCE.sub("", text)
    text = _HEADING.sub("", text)
    text = _BULLET.sub(r"\1• ", text)
    text = _EMPHASIS.sub(r"\2", text)
    text = _CODE.sub(r"\1", text)
    return _LINK.sub(r"\1 (\2)", text)


_LEADING_MENTION = re.compile(r"^\s*@\S+\s*")


def strip_mention(text: str, bot_name: str | None) -> str:
    """Remove the bot's @mention so that `@bot /restart` arrives as `/restart`."""
    if bot_name:
        stripped = re.sub(r"@" + re.escape(bot_name) + r"(\s+|$)", "", text, count=1)
        if stripped != text:
            return stripped.strip()
    return _LEADING_MENTION.sub("", text, count=1).strip()
