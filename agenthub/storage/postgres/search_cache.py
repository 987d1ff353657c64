"""The postings of frequent terms held in memory by each instance, kept level with the shared index.

A term in many docs is read from the table once per instance, then only its postings added since (by doc id: an
agent's index writers commit one at a time and draw their ids after taking its stats row, so a doc committed later
has a greater id than every doc read so far). A write that removes any doc of the agent moves its generation
(`search_stats.generation`, read by the search in the same snapshot) and logs the ids it removed under it
(`search_removed`): an instance behind takes those docs out of what it holds, and reads every term again only when
the log does not reach back to its generation (the agent's index rebuilt, or more removals than it keeps). The least
recently asked terms go when the instance holds more than `budget` postings.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from psycopg import AsyncConnection
from psycopg.rows import TupleRow

Conn = AsyncConnection[TupleRow]

CACHED_DF = 1_000
"""A term in at least this many docs is held in memory (rarer ones are read from the table each time)."""
BUDGET = 2_000_000
"""Postings an instance holds at most (32 bytes each)."""
NO_TS = np.iinfo(np.int64).min
Removed = NDArray[np.int64] | None

DOC_SRC = "CASE WHEN d.kind = 'memory' THEN d.name ELSE d.session END"
DOC_CHANNEL = (
    "CASE WHEN d.kind != 'memory' AND d.session ~ '^[^:]*:[^:]*:' THEN split_part(d.session, ':', 2) ELSE '' END"
)
"""A doc's source (its session, or a memory file's name) and channel (`session_channel`) as its postings carry them."""
POSTINGS = f"""
q AS MATERIALIZED (
    SELECT * FROM unnest(%(terms)s::text[], %(after)s::bigint[]) AS q(term, after)
), p AS (
    SELECT q.term, u.doc, u.tf, u.length, u.ts, n.src, n.channel
    FROM q JOIN search_blocks b ON b.agent = %(agent)s AND b.term = q.term AND b.last > q.after
    CROSS JOIN LATERAL unnest(b.docs, b.tfs, b.lengths, b.ts, b.sources) AS u(doc, tf, length, ts, source)
    JOIN search_names n ON n.agent = %(agent)s AND n.code = u.source
    WHERE u.doc > q.after
    UNION ALL
    SELECT q.term, d.id, u.tf, d.length, d.ts, {DOC_SRC}, {DOC_CHANNEL}
    FROM search_docs d CROSS JOIN LATERAL unnest(d.terms, d.tfs) AS u(term, tf) JOIN q ON q.term = u.term
    WHERE d.agent = %(agent)s AND d.id > %(packed)s AND d.terms && %(terms)s::text[] AND d.id > q.after
)"""
"""`WITH` parts: `p`, the postings (term, doc, tf, length, ts, src, channel) of the query terms of docs above each
term's `after`: those packed in the terms' blocks (their source and channel named by code, `search_names`), and
those of the agent's pending docs (above `packed`, read in the same snapshot as the blocks)."""

_READ = f"""
WITH {POSTINGS}
SELECT p.term, string_agg(int8send(p.doc), ''::bytea), string_agg(int4send(p.tf), ''::bytea),
       string_agg(int4send(p.length), ''::bytea), string_agg(int8send(coalesce(p.ts, %(no_ts)s)), ''::bytea),
       array_agg(p.src), array_agg(p.channel)
FROM p GROUP BY p.term
"""
"""Each term's postings added since `after`, one row per term: the numbers packed as big-endian bytes (one value to
send and load for a column, not one per posting), the sources and channels as arrays (aggregated in the same order)."""
_PACKED = (">i8", ">i4", ">i4", ">i8")


_LOGGED = "FROM search_removed WHERE agent = %(agent)s AND generation > %(held)s AND generation <= %(now)s"
_REMOVED = f"SELECT (SELECT count(*) {_LOGGED}), ARRAY(SELECT unnest(docs) {_LOGGED})"
"""How many removals are logged between two generations, and the ids of the docs they removed."""


async def _removed(conn: Conn, agent: str, held: int, now: int) -> NDArray[np.int64] | None:
    """The ids of the docs removed from `agent` after generation `held` up to `now` (None: the log does not hold
    every generation between: the agent's index was rebuilt, or the log's oldest were pruned)."""
    if now <= held:
        return None
    cursor = await conn.execute(_REMOVED, {"agent": agent, "held": held, "now": now})
    row = await cursor.fetchone()
    if row is None or int(row[0]) != now - held:
        return None
    return np.array(row[1], dtype=np.int64)


@dataclass
class Postings:
    """One term's postings as columns: doc id, tf, doc length, doc time (`NO_TS`: none), source and channel codes."""

    docs: NDArray[np.int64]
    tfs: NDArray[np.int32]
    lengths: NDArray[np.int32]
    ts: NDArray[np.int64]
    srcs: NDArray[np.int32]
    channels: NDArray[np.int32]

    def __len__(self) -> int:
        return len(self.docs)

    def without(self, docs: NDArray[np.int64]) -> Postings:
        """These postings but those of `docs` (itself when it holds none of them)."""
        kept = np.isin(self.docs, docs, invert=True, kind="table")
        if kept.all():
            return self
        return Postings(*(getattr(self, f)[kept] for f in _FIELDS))


def postings_of(rows: Sequence[tuple[int, int, int, int, int, int]]) -> Postings:
    """Rows of (doc, tf, length, ts, source code, channel code)."""
    table = np.array(rows, dtype=np.int64).reshape(len(rows), 6)
    return Postings(*(np.ascontiguousarray(table[:, i], dtype=dtype) for i, dtype in enumerate(_DTYPES)))


def joined(parts: Sequence[Postings]) -> Postings:
    return Postings(*(np.concatenate([getattr(p, f) for p in parts]) for f in _FIELDS))


_FIELDS = ("docs", "tfs", "lengths", "ts", "srcs", "channels")
_DTYPES = (np.int64, np.int32, np.int32, np.int64, np.int32, np.int32)


@dataclass
class _Agent:
    generation: int
    terms: OrderedDict[str, tuple[Postings, int]] = field(default_factory=OrderedDict)  # term → (postings, last id)


class Codes:
    """Source and channel names as small integers (one table for every agent of the instance); new names are
    numbered under a lock, as the cache's worker thread and the loop both name them."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}
        self._numbering = threading.Lock()

    def __len__(self) -> int:
        return len(self._codes)

    def code(self, name: str) -> int:
        found = self._codes.get(name)
        if found is None:
            with self._numbering:
                found = self._codes.setdefault(name, len(self._codes))
        return found

    def known(self, names: Sequence[str]) -> NDArray[np.int32]:
        return np.array([self._codes[n] for n in names if n in self._codes], dtype=np.int32)


class PostingsCache:
    def __init__(self, *, cached_df: int = CACHED_DF, budget: int = BUDGET) -> None:
        self.cached_df = cached_df
        self.budget = budget
        self.codes = Codes()
        self._agents: dict[str, _Agent] = {}
        self._lock = asyncio.Lock()  # one search brings the memory level at a time (no posting read twice)
        self.read = 0
        """Postings read from the table into memory (a statistic: the cache at work)."""
        self.dropped = 0
        """How many times an agent's held postings were dropped whole (a statistic: a removal not in the log)."""

    async def postings(
        self, conn: Conn, agent: str, generation: int, terms: Sequence[str], packed: int
    ) -> dict[str, Postings]:
        """The terms' postings as of the caller's snapshot (`generation` and `packed`: the agent's, read in that
        snapshot)."""
        await self._lock.acquire()
        work: asyncio.Future[dict[str, Postings]] | None = None
        try:
            work = await self._level(conn, agent, generation, terms, packed)
        finally:
            if work is None:
                self._lock.release()
        # the lock goes when the worker thread is done with `held`, not when this search is (a cancelled search's
        # thread goes on: another search reading or joining the same postings meanwhile would hold them twice)
        work.add_done_callback(self._done)
        return await asyncio.shield(work)

    def _done(self, work: asyncio.Future[dict[str, Postings]]) -> None:
        self._lock.release()
        if not work.cancelled():
            work.exception()  # retrieved: a cancelled search's failure is not reported again as never retrieved

    async def _level(
        self, conn: Conn, agent: str, generation: int, terms: Sequence[str], packed: int
    ) -> asyncio.Future[dict[str, Postings]]:
        held = self._agents.get(agent)
        removed = None
        if held is not None and held.generation != generation:
            removed = await _removed(conn, agent, held.generation, generation)
            if removed is None:  # too far behind (or the agent's index was rebuilt): every term read again
                held = None
                self.dropped += 1
        if held is None:
            held = self._agents[agent] = _Agent(generation)
        after = [held.terms[t][1] if t in held.terms else -1 for t in terms]
        params = {"agent": agent, "terms": list(terms), "after": after, "no_ts": int(NO_TS), "packed": packed}
        cursor = await conn.execute(_READ, params, binary=True)
        rows = await cursor.fetchall()
        if not rows and (removed is None or not len(removed)):  # nothing to build: no hop to a thread and back
            level = asyncio.get_running_loop().create_future()
            level.set_result(self._merge(held, generation, removed, terms, rows))
            return level
        # the arrays are built, cut and joined on a worker thread; the lock keeps every other search out of `held`
        return asyncio.ensure_future(asyncio.to_thread(self._merge, held, generation, removed, terms, rows))

    def _merge(
        self, held: _Agent, generation: int, removed: Removed, terms: Sequence[str], rows: Sequence[Any]
    ) -> dict[str, Postings]:
        if removed is not None and len(removed):
            for term, (postings, last) in held.terms.items():
                held.terms[term] = (postings.without(removed), last)
        held.generation = generation
        fresh = {row[0]: self._unpacked(row[1:]) for row in rows}
        self.read += sum(len(p) for p in fresh.values())
        found: dict[str, Postings] = {}
        for term in terms:
            old, new = held.terms.pop(term, None), fresh.get(term)
            if new is None:
                both, last = old if old is not None else (postings_of([]), -1)
            else:
                both = new if old is None else joined([old[0], new])
                last = max(old[1] if old is not None else -1, int(new.docs.max()))
            held.terms[term] = (both, last)
            found[term] = both
        self._evict(keep=set(terms))
        return found

    def _unpacked(self, row: Sequence[Any]) -> Postings:
        """A `_READ` row's postings as columns."""
        numbers = [np.frombuffer(bytes(b), dtype=t).astype(t[1:]) for b, t in zip(row[:4], _PACKED, strict=True)]
        code = self.codes.code
        srcs, channels = (np.fromiter(map(code, names), dtype=np.int32, count=len(names)) for names in row[4:])
        return Postings(numbers[0], numbers[1], numbers[2], numbers[3], srcs, channels)

    def _evict(self, keep: set[str]) -> None:
        total = sum(len(p) for held in self._agents.values() for p, _ in held.terms.values())
        for held in self._agents.values():
            for term in list(held.terms):
                if total <= self.budget:
                    return
                if term not in keep:
                    total -= len(held.terms.pop(term)[0])
