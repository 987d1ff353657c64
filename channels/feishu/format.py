"""Non-streamed replies: pick text, `post` or a markdown card by content, and split long content safely."""

from __future__ import annotations

import re
from typing import Any, Literal

Format = Literal["text", "post", "card"]
TEXT_MAX_CHARS = 200
"""Plain text only for short answers without markdown; longer ones read better as `post`."""
POST_MAX_CHARS = 4000
CARD_MAX_CHARS = 3500
"""Cards are capped at 30 KB: 3500 characters stays under it even for 4-byte UTF-8."""

_CARD_MARKERS = re.compile(r"^(```|#{1,6} |\|.*\|\s*$)", re.MULTILINE)
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


def split_text(text: str, limit: int) -> list[str]:
    """Split at line boundaries into chunks of at most `limit` characters; a cut inside a ``` block closes
    the fence in one chunk and reopens it in the next, so every chunk renders on its own."""
    if len(text) <= limit:
        return [text]
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    fence: str | None = None
    for line in _hard_wrap(text.split("\n"), limit - 8):
        if size + len(line) + 1 > limit - 8 and current:
            chunks.append("\n".join([*current, "```"] if fence is not None else current))
            current = [fence] if fence is not None else []
            size = sum(len(x) + 1 for x in current)
        current.append(line)
        size += len(line) + 1
        if line.lstrip().startswith("```"):
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
    """Every message to send for one answer, in order, as `(format, chunk)`."""
    fmt = choose_format(text)
    limit = CARD_MAX_CHARS if fmt == "card" else POST_MAX_CHARS
    chunks = split_text(text, limit)
    return [(fmt if fmt != "text" or len(chunk) <= TEXT_MAX_CHARS else "post", chunk) for chunk in chunks]


def plain_chunks(text: str) -> list[tuple[str, dict[str, Any]]]:
    """The last resort when a card or post is refused: plain text chunks."""
    return [build_content("text", chunk) for chunk in split_text(text, POST_MAX_CHARS)]
