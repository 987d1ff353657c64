"""Memory lines that quote a forgotten person: a line is removed when it shares a long-enough stretch of text
with one of their redacted messages (a fact restated in other words cannot be recognised without a model)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

QUOTE_WEIGHT = 15
"""How much shared text marks a quote: 15 Latin characters (two or three words) or 5 Chinese characters."""
WIDE_WEIGHT = 3
_SPACES = re.compile(r"\s+")


def _normalised(text: str) -> str:
    return _SPACES.sub(" ", text).strip().casefold()


def _weight(ch: str) -> int:
    return WIDE_WEIGHT if ord(ch) >= 0x2E80 else 1  # CJK and beyond carry about three Latin letters' meaning


def _windows(text: str) -> Iterator[str]:
    """From each position, the shortest stretch whose weight reaches QUOTE_WEIGHT. Two texts share a stretch of
    that weight exactly when they share one of these windows, so a set lookup finds every quote."""
    end, weight = 0, 0
    for start in range(len(text)):
        while end < len(text) and weight < QUOTE_WEIGHT:
            weight += _weight(text[end])
            end += 1
        if weight < QUOTE_WEIGHT:
            return
        yield text[start:end]
        weight -= _weight(text[start])


class QuoteMatcher:
    """Recognises text that quotes any of `sources` (casefolded, whitespace collapsed)."""

    def __init__(self, sources: Iterable[str]) -> None:
        self._windows = {w for source in sources for w in _windows(_normalised(source))}

    def __bool__(self) -> bool:
        return bool(self._windows)

    def quotes(self, text: str) -> bool:
        return any(w in self._windows for w in _windows(_normalised(text)))

    def scrub(self, text: str) -> tuple[str, int]:
        """`text` without the lines that quote a source, and how many lines went."""
        kept, removed = [], 0
        for line in text.splitlines(keepends=True):
            if self.quotes(line):
                removed += 1
            else:
                kept.append(line)
        return "".join(kept), removed

    def replace(self, text: str, marker: str) -> tuple[str, int]:
        """`text` with each line that quotes a source replaced by `marker` (`> marker` for a `>` quote line; a
        run of such lines becomes one), every other character kept; how many lines were replaced."""
        out: list[str] = []
        replaced, last = 0, None
        for line in text.splitlines(keepends=True):
            if not self.quotes(line):
                out.append(line)
                last = None
                continue
            replaced += 1
            body = line.rstrip("\r\n")
            new = ("> " if body.lstrip().startswith(">") else "") + marker + line[len(body) :]
            if new != last:
                out.append(new)
            last = new
        return "".join(out), replaced
