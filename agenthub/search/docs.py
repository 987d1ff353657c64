"""History records and memory files turned into search docs (passage + terms), for any index backend."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Iterable
from typing import Any

from agenthub.search.extract import message_text, skipped_tool_ids
from agenthub.search.text import index_terms
from agenthub.storage.search_index import MEMORY, Passage, SearchDoc, SourceRef
from agenthub.storage.storable import storable


class RecordReader:
    """Turns a source's records into docs, in order; remembers which `tool_use` results are not indexed
    (`memory_search`, `read_file`) so their `tool_result` in a later record is skipped too."""

    def __init__(self, skipped: Iterable[str] = (), known_skipped: Callable[[str], bool] | None = None) -> None:
        self.skipped: list[str] = list(skipped)
        self._skipped_set = set(self.skipped)
        self._tool_names: dict[str, str] = {}
        self._known = known_skipped

    def doc(self, source: SourceRef, seq: int, record: dict[str, Any]) -> SearchDoc | None:
        """The doc of one history record at position `seq`, None when nothing of it is searchable."""
        for tool_id in skipped_tool_ids(record):
            if tool_id not in self._skipped_set:
                self._skipped_set.add(tool_id)
                self.skipped.append(tool_id)
        text = storable(message_text(record, self._tool_names, self._is_skipped))
        if not text:
            return None
        ts = record.get("timestamp")
        sender = record.get("sender_id")
        passage = Passage(
            source,
            seq,
            str(record.get("role") or ""),
            storable(str(sender))
            if isinstance(sender, str | int) and not isinstance(sender, bool) and sender != ""
            else None,
            _millis(ts),
            text,
        )
        return SearchDoc(passage, speaker_terms(passage.speaker) + tuple(index_terms(text)))

    def _is_skipped(self, tool_id: str) -> bool:
        return tool_id in self._skipped_set or (self._known is not None and self._known(tool_id))


FIRST_MILLIS = int(dt.datetime(2, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)
LAST_MILLIS = int(dt.datetime(9998, 12, 31, tzinfo=dt.UTC).timestamp() * 1000)
"""The times a passage keeps: a date in every time zone (a passage's time is told as one), and within 64 bits (an
index's integer column, SQLite's or PostgreSQL's bigint)."""


def _millis(ts: object) -> int | None:
    """A record's timestamp as the index stores it; None for none, or for one no date can tell (NaN, an infinity,
    beyond year 9998: a hand-edited line parses, and must not fail the read of its file or the telling of a hit)."""
    if isinstance(ts, bool) or not isinstance(ts, int | float):
        return None
    if isinstance(ts, float) and not math.isfinite(ts):
        return None
    millis = int(ts)
    return millis if FIRST_MILLIS <= millis <= LAST_MILLIS else None


def speaker_terms(speaker: str | None) -> tuple[str, ...]:
    """The speaker's terms, each once, that a record's doc starts with: a question names the person ("what car does
    Evan drive?") and the turn that answers is that person's own, whose name is only its sender id. Once, not per
    occurrence, so the speaker weighs like one word of the turn."""
    return tuple(dict.fromkeys(index_terms(speaker))) if speaker else ()


def memory_docs(source: SourceRef, text: str, ts: int | None) -> list[SearchDoc]:
    """One doc per non-empty line of a memory file or profile (`seq` = the line number), role `memory`."""
    return [
        SearchDoc(Passage(source, number, MEMORY, None, ts, line.strip()), tuple(index_terms(line)))
        for number, line in enumerate(storable(text).splitlines())
        if line.strip()
    ]


class SearchDocReaders:
    """How this package turns records and memory files into docs, handed to a backend's feed."""

    def records(self, skipped: Iterable[str]) -> RecordReader:
        return RecordReader(skipped)

    def memory(self, source: SourceRef, text: str, ts: int | None) -> list[SearchDoc]:
        return memory_docs(source, text, ts)


DOC_READERS = SearchDocReaders()
