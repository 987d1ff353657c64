"""Text shaping for WeCom: byte-bounded splitting, markdown stripping, @mention removal."""

from __future__ import annotations

import re
from collections.abc import Callable

_NOTE_GAP = "\n\n"  # between the text and a note appended to it
# Strongest break first; a break is used when it falls in the back half of the window.
_BREAKS = ("\n\n", "\n", "。", "！", "？", "；", ". ", "! ", "? ", "; ", "，", ", ", " ")


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def _fitting_prefix_len(text: str, limit: int) -> int:
    """How many characters of `text` fit in `limit` UTF-8 bytes (never cutting a character)."""
    return len(text.encode("utf-8")[:limit].decode("utf-8", "ignore"))


def split_utf8(text: str, limit: int, *, min_fill: float = 0.5) -> list[str]:
    """Split into ordered parts of at most `limit` UTF-8 bytes, preferring paragraph, line, sentence breaks.

    A break is used only past `min_fill` of the window (else the cut falls at the last whole character):
    0.5 reads best, values near 1 pack the text into the fewest parts. `"".join(parts) == text` always holds.
    """
    if limit < 4:
        raise ValueError("limit must hold at least one UTF-8 character")
    if not 0 <= min_fill < 1:
        raise ValueError("min_fill must be in [0, 1)")
    parts: list[str] = []
    rest = text
    while utf8_len(rest) > limit:
        cut = _fitting_prefix_len(rest, limit)
        window = rest[:cut]
        for sep in _BREAKS:
            end = window.rfind(sep) + len(sep)
            if end > int(cut * min_fill) and end >= len(sep):
                cut = end
                break
        parts.append(rest[:cut])
        rest = rest[cut:]
    if rest:
        parts.append(rest)
    return parts


def pack_utf8(text: str, limit: int) -> list[str]:
    """Split into as few parts of at most `limit` bytes as practical: breaks only in a window's last eighth."""
    return split_utf8(text, limit, min_fill=0.875)


def head_with_note(text: str, note_for: Callable[[int], str], limit: int) -> tuple[str, int]:
    """One message of at most `limit` bytes: as much of `text` as fits, then `note_for(held_back_bytes)`.

    Returns (message, held_back_bytes); the note is left out only when all of `text` fits.
    """
    if utf8_len(text) <= limit:
        return text, 0
    room = limit - utf8_len(note_for(utf8_len(text))) - len(_NOTE_GAP)  # the longest the note can get
    if room < 4:
        raise ValueError("the note leaves no room for the text")
    head = pack_utf8(text, room)[0]
    held = utf8_len(text) - utf8_len(head)
    trailing = len(head) - len(head.rstrip("\n"))
    gap = _NOTE_GAP[min(trailing, len(_NOTE_GAP)) :]  # a blank line before the note, not more
    return head + gap + note_for(held), held


_FENCE = re.compile(r"^\s*```.*$\n?", re.MULTILINE)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+", re.MULTILINE)
_BULLET = re.compile(r"^(\s*)[-*+]\s+", re.MULTILINE)
_EMPHASIS = re.compile(r"(\*\*|__)(.+?)\1")
_CODE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\[([^\]\n]+)\]\((\S+?)\)")
_FENCED_BLOCK = re.compile(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```[^\n]*(?:\n|\Z)", re.MULTILINE | re.DOTALL)
_CODE_SLOT = re.compile("\x00(\\d+)\x00")


def strip_markdown(text: str) -> str:
    """Turn markdown into readable plain text for clients that do not render it (the WeChat plugin).

    Code is kept verbatim: fenced blocks lose only their fence lines, inline code only its backticks.
    """
    out: list[str] = []
    pos = 0
    for block in _FENCED_BLOCK.finditer(text):
        out.append(_strip_prose(text[pos : block.start()]))
        out.append(block.group(1))
        pos = block.end()
    out.append(_strip_prose(text[pos:]))
    return "".join(out)


def _strip_prose(text: str) -> str:
    spans: list[str] = []

    def park(match: re.Match[str]) -> str:
        spans.append(match.group(1))
        return f"\x00{len(spans) - 1}\x00"

    text = _CODE.sub(park, _FENCE.sub("", text))
    text = _HEADING.sub("", text)
    text = _BULLET.sub(r"\1• ", text)
    text = _EMPHASIS.sub(r"\2", text)
    text = _LINK.sub(r"\1 (\2)", text)
    return _CODE_SLOT.sub(lambda m: spans[int(m.group(1))] if int(m.group(1)) < len(spans) else m.group(0), text)


_LEADING_MENTION = re.compile(r"^\s*@\S+\s*")


def strip_mention(text: str, bot_name: str | None) -> str:
    """Remove the bot's @mention so that `@bot /restart` arrives as `/restart`.

    With `bot_name` only `@<bot_name>` is removed, so other people's mentions stay. Without it the leading
    mention is taken to be the bot's (it usually is, but "@李四 @bot 看看" then loses "@李四").
    """
    if bot_name:
        return re.sub(r"@" + re.escape(bot_name) + r"(\s+|$)", "", text, count=1).strip()
    return _LEADING_MENTION.sub("", text, count=1).strip()
