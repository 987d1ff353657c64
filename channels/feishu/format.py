"""Non-streamed replies: pick text, `post` or a markdown card by content, and split long content safely."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any, Literal

Format = Literal["text", "post", "card"]
TEXT_MAX_CHARS = 200
"""Plain text only for short answers without markdown; longer ones read better as `post`."""
POST_MAX_CHARS = 4000
CARD_MAX_CHARS = 3500
"""Cards are capped at 30 KB: 3500 characters stays under it even for 4-byte UTF-8."""
CARD_SPLIT_BYTES = 25 * 1024
"""A streaming card is closed, and the answer continues in a new one, before its text passes this many bytes
(JSON-escaped UTF-8), leaving room under Feishu's 30 KB card limit for the card's own JSON."""

_CARD_MARKERS = re.compile(r"^(```|#{1,6} |\|.*\|\s*$)", re.MULTILINE)
_TABLE_ROW = re.compile(r"^[ \t]*\|")
_BREAKS = ("\n\n", "\n", "。", "！", "？", "；", ". ", "! ", "? ", "; ", "，", ", ", " ")
"""Where a card may end, strongest first; used when it falls in the back half of what fits."""
_MD_MARKERS = re.compile(r"(\*\*|__|`|\[[^\]]+\]\([^)]+\)|^\s*[-*+] |^\s*\d+\. |^> )", re.MULTILINE)


def choose_format(text: str) -> Format:
    """Code, tables and headings need a card; other markdown a `post`; short plain text stays text."""
    if _CARD_MARKERS.search(text):
        return "card"
    if _MD_MARKERS.search(text) or len(text) > TEXT_MAX_CHARS:
        return "post"
    return "text"


def build_content(fmt: Format, text: str) -> tuple[str, dict[str, Any]]:
    """`(msg_type, content)` for one chunk."""
    if fmt == "text":
        return "text", {"text": text}
    if fmt == "post":
        return "post", {"zh_cn": {"title": "", "content": [[{"tag": "md", "text": text}]]}}
    return "interactive", markdown_card(text)


def markdown_card(text: str) -> dict[str, Any]:
    return {"schema": "2.0", "body": {"elements": [{"tag": "markdown", "content": text}]}}


def is_fence(line: str) -> bool:
    return line.lstrip().startswith("```")


def open_fence(text: str) -> str | None:
    """The opening line (stripped, info string kept) of the ``` block `text` ends inside, or None."""
    fence: str | None = None
    for line in text.split("\n"):
        if is_fence(line):
            fence = None if fence is not None else line.strip()
    return fence


def split_text(text: str, limit: int) -> list[str]:
    """Split at line boundaries into chunks of at most `limit` characters; a cut inside a ``` block closes
    the fence in one chunk and reopens it (same info string) in the next, so every chunk renders on its own.
    A chunk never ends with a block's opening line: that line moves to the next chunk."""
    if len(text) <= limit:
        return [text]
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    fence: str | None = None
    for line in _hard_wrap(text.split("\n"), limit - 8):
        if size + len(line) + 1 > limit - 8 and current:
            carry = [current.pop()] if fence is not None and is_fence(current[-1]) else []
            if current:  # `carry` is the block's opening line: the block starts in the next chunk
                chunks.append("\n".join([*current, "```"] if fence is not None and not carry else current))
            current = carry or ([fence] if fence is not None else [])
            size = sum(len(x) + 1 for x in current)
        current.append(line)
        size += len(line) + 1
        if is_fence(line):
            fence = None if fence is not None else line.strip()
    if current:
        chunks.append("\n".join(current))
    return [c for c in chunks if c.strip()]


def _hard_wrap(lines: list[str], width: int) -> list[str]:
    out: list[str] = []
    for line in lines:
        while len(line) > width:
            out.append(line[:width])
            line = line[width:]
        out.append(line)
    return out


def plan_reply(text: str) -> list[tuple[Format, str]]:
    """Every message to send for one answer, in order, as `(format, chunk)`; a card holds at most one table
    (Feishu refuses more with 11310), so a card answer is split before each further table."""
    fmt = choose_format(text)
    if fmt == "card":
        return [("card", chunk) for part in split_tables(text) for chunk in split_text(part, CARD_MAX_CHARS)]
    chunks = split_text(text, POST_MAX_CHARS)
    return [(fmt if fmt != "text" or len(chunk) <= TEXT_MAX_CHARS else "post", chunk) for chunk in chunks]


def table_starts(text: str) -> list[int]:
    """Offsets of the lines that start a markdown table: a `|` line after a non-`|` line, outside code fences.
    A lone `|` line counts too, so a table still streaming in is seen before its delimiter row arrives."""
    starts: list[int] = []
    offset, in_fence, in_table = 0, False, False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            in_fence, in_table = not in_fence, False
        elif not in_fence:
            row = bool(_TABLE_ROW.match(line))
            if row and not in_table:
                starts.append(offset)
            in_table = row
        offset += len(line) + 1
    return starts


def split_tables(text: str) -> list[str]:
    """`text` cut before its second, third, … table: parts that each hold at most one, joined they are `text`."""
    cuts = [0, *table_starts(text)[1:], len(text)]
    return [text[a:b] for a, b in itertools.pairwise(cuts) if b > a]


def json_bytes(text: str) -> int:
    """The size `text` takes inside a card's JSON: UTF-8 after escaping (newlines and quotes count twice)."""
    return len(json.dumps(text, ensure_ascii=False).encode()) - 2


def card_cut(text: str, limit_bytes: int = CARD_SPLIT_BYTES) -> int | None:
    """Where a card showing `text` must end for its rest to go into the next card: before a second table, or
    at a line or sentence break before `limit_bytes`; None when `text` fits in one card."""
    second_table = table_starts(text)[1:2]
    head = text[: second_table[0]] if second_table else text
    if len(head) * 6 <= limit_bytes or json_bytes(head) <= limit_bytes:  # no character takes over 6 bytes
        return second_table[0] if second_table else None
    fits = _fitting_chars(head, limit_bytes)
    window = head[:fits]
    for sep in _BREAKS:
        end = window.rfind(sep) + len(sep)
        if end >= len(sep) and end > fits // 2:
            return end
    return fits


def _fitting_chars(text: str, limit_bytes: int) -> int:
    """The longest prefix of `text` (at least one character) whose `json_bytes` is within `limit_bytes`."""
    low, high = 1, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        if json_bytes(text[:mid]) <= limit_bytes:
            low = mid
        else:
            high = mid - 1
    return low


def plain_chunks(text: str) -> list[tuple[str, dict[str, Any]]]:
    """The last resort when a card or post is refused: plain text chunks."""
    return [build_content("text", chunk) for chunk in split_text(text, POST_MAX_CHARS)]
