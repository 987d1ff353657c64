"""The `SearchIndexStore` port: ranked (BM25) retrieval over already-tokenised docs, one index per deployment.

Storage never tokenises: callers (agenthub.search) hand it docs with their `terms` and queries as term lists, so
every backend ranks the same terms with the same formula (`score_of`, `rank_key`) and gives the same order.

Ranking, per agent (every backend computes exactly this):

    N      = the number of the agent's docs (every source and kind, in scope or not)
    avgdl  = (sum of len(terms) over those docs) / N
    df(t)  = how many of the agent's docs hold term t
    idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    tf     = how many times t is in the doc's terms; dl = len(terms)
    bm25   = sum over the query's DISTINCT terms t in the doc:
             idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)),   k1 = 1.2, b = 0.3
    r      = (ts - ts_min) / (ts_max - ts_min), ts_min/ts_max over the agent's docs that have a ts; r = 0 when the doc
             has no ts or ts_max == ts_min
    score  = bm25 * (1 + RECENCY_PRIOR * r)          (a mild prior: the newest doc weighs at most 10 % more)

Order (`rank_key`): score rounded to 9 decimals, highest first; ties: newer ts first (no ts = oldest), then
session, kind, name ascending, then higher seq first. Only docs holding at least one query term are hits; docs
outside the scope never are, but they count in N, df and avgdl. Hits are distinct by (session, role, ts, text): the
same message in the archive and in the history (a crash between archive and replace) is one hit, the better ranked.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Literal, Self

from agenthub.storage.memory_files import MemoryName

DocKind = Literal["history", "archive", "memory"]
HISTORY: DocKind = "history"
ARCHIVE: DocKind = "archive"
MEMORY: DocKind = "memory"
"""history: a session's working history (L2 summaries are its `role: system` `[历史摘要]` records); archive: what
compaction moved out of it; memory: one line of a memory file or profile."""

K1 = 1.2
B = 0.3
"""b: 0.3, not the textbook 0.75: chat turns are short and of every length, and a strong length normalisation
lets a two-word turn that shares one word (a name) outrank the long turn that answers (docs/memory.md)."""
RECENCY_PRIOR = 0.1
SCORE_DECIMALS = 9


@dataclass(frozen=True, order=True)
class SourceRef:
    """Where docs come from: a session's history or archive (`name` ""), or one memory file (`session` "",
    `name` = `memory_doc_name(...)`). Replacing or dropping happens per source."""

    kind: DocKind
    session: str
    name: str = ""


def history_source(session: str) -> SourceRef:
    return SourceRef(HISTORY, session)


def archive_source(session: str) -> SourceRef:
    return SourceRef(ARCHIVE, session)


def memory_source(name: MemoryName) -> SourceRef:
    return SourceRef(MEMORY, "", memory_doc_name(name))


def memory_doc_name(name: MemoryName) -> str:
    """The stable text name of a memory file in the index (`data/<agent>/memory/MEMORY.md`, `auth/USER.md`, ...)."""
    return ("auth/" if name.in_auth else "data/") + str(name.relative)


@dataclass(frozen=True)
class Passage:
    """One stored doc as a search shows it. `seq`: its stable position in its source (the history line number;
    a memory file's line number), increasing with the source's order; `speaker`: the record's sender id, if any;
    `ts`: ms since epoch, None when unknown."""

    source: SourceRef
    seq: int
    role: str
    speaker: str | None
    ts: int | None
    text: str

    @property
    def session(self) -> str:
        return self.source.session

    @property
    def kind(self) -> DocKind:
        return self.source.kind


@dataclass(frozen=True)
class SearchDoc:
    """A doc to store: the passage and its terms (`agenthub.search.text.index_terms` of its text, repeats kept)."""

    passage: Passage
    terms: tuple[str, ...]


@dataclass(frozen=True)
class SearchHit:
    """A ranked passage with the doc just before and just after it in the same source (by seq; None at an end)."""

    passage: Passage
    score: float
    before: Passage | None = None
    after: Passage | None = None


def _no_channel(channel: str) -> bool:
    return False


@dataclass(frozen=True)
class SearchScope:
    """What one search may see. `session` set: that session's history and archive only. `session` None: the
    history and archive of every session of the agent whose channel `agent_scoped` accepts (asked once per channel
    the agent has sessions on; a chat-scoped chat is never seen). And in both cases the memory docs of exactly
    `memory_names` (`memory_doc_name`), no other."""

    session: str | None
    memory_names: tuple[str, ...] = ()
    agent_scoped: Callable[[str], bool] = field(default=_no_channel, compare=False)


def session_channel(session: str) -> str:
    """The channel part of an `agent:channel:chat_id` session key."""
    parts = session.split(":", 2)
    return parts[1] if len(parts) == 3 else ""


def idf(n_docs: int, df: int) -> float:
    return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))


def term_score(idf_t: float, tf: int, dl: int, avgdl: float) -> float:
    return idf_t * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))


def recency(ts: int | None, ts_min: int | None, ts_max: int | None) -> float:
    if ts is None or ts_min is None or ts_max is None or ts_max <= ts_min:
        return 0.0
    return (ts - ts_min) / (ts_max - ts_min)


def score_of(bm25: float, ts: int | None, ts_min: int | None, ts_max: int | None) -> float:
    return bm25 * (1 + RECENCY_PRIOR * recency(ts, ts_min, ts_max))


def rank_key(score: float, passage: Passage) -> tuple[float, int, str, str, str, int]:
    """Sort ascending by this to get the port's order (best first)."""
    source = passage.source
    ts = passage.ts if passage.ts is not None else -1
    return (-round(score, SCORE_DECIMALS), -ts, source.session, source.kind, source.name, -passage.seq)


def identity(passage: Passage) -> tuple[str, str, int | None, str]:
    """Hits with the same identity are one hit (a message in both the archive and the history)."""
    return (passage.session, passage.role, passage.ts, passage.text)


class JsonWatermark:
    """Base of a backend's watermark dataclass, kept as the port's opaque text (JSON of its fields)."""

    @classmethod
    def parse(cls, text: str | None) -> Self | None:
        """The watermark `text` holds; None when there is none or it is not one of this kind."""
        if not text:
            return None
        try:
            return cls(**json.loads(text))
        except (ValueError, TypeError):
            return None

    def dump(self) -> str:
        return json.dumps(asdict(self))  # type: ignore[call-overload]
