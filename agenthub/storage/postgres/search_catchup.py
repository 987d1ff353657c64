"""Many sessions of one agent caught up with the shared index in one transaction of three round trips: their
sources' locks and state, their new records (with the check that each source only grew), then every new doc,
posting and df in one statement with every watermark. A session that was rewritten since it was indexed (its first
or last indexed record changed) is left out and returned: the caller indexes it again on its own
(`search_sync.PostgresIndexFeed.sync_session`).

Lock order, as every index writer keeps it: the sessions' source locks (sorted, so two batches never wait on each
other in a cycle), then the agent's stats row (`search.lock_agent`), then the term rows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agenthub import jsonsafe
from agenthub.session_keys import SessionKey
from agenthub.storage.postgres.search_writes import Conn, insert_batch, pending_after
from agenthub.storage.search_index import ARCHIVE, HISTORY, JsonWatermark, SearchDoc, SourceRef

HistoryRecord = dict[str, Any]
DocMaker = Callable[
    [SourceRef, Sequence[tuple[int, HistoryRecord]], int, Sequence[str]], tuple[list[SearchDoc], list[str]]
]
"""(source, its records as (seq, record) oldest first, the first seq not indexed yet, the tool_use ids whose results
are not indexed so far) → (the docs of the records from that seq on, the skipped ids now). The records before that
seq are context only (a tool result's tool_use)."""
KEEP_SKIPPED = 64

_LOCK = """
SELECT pg_advisory_xact_lock(hashtextextended('search/' || %(agent)s || '/history/' || s || '/', 0)),
       set_config('synchronous_commit', 'off', true)
FROM (SELECT s FROM unnest(%(sessions)s::text[]) WITH ORDINALITY AS u(s, at) ORDER BY at) l
"""
"""The sessions' locks in the order given (sorted by the caller); only docs are added, with their watermarks, so
the commit need not wait for the WAL flush (a server crash loses both together: indexed again from the tables)."""
_STATE = """
SELECT h.next_seq::text || '@' || h.changed_at::text,
       (SELECT watermark FROM search_sources WHERE agent = %(agent)s AND kind = 'history' AND session = q.session
        AND name = ''),
       (SELECT watermark FROM search_sources WHERE agent = %(agent)s AND kind = 'archive' AND session = q.session
        AND name = ''),
       EXISTS (SELECT 1 FROM session_archive a WHERE a.agent = %(agent)s AND a.channel = q.channel
               AND a.chat_id = q.chat_id)
FROM unnest(%(sessions)s::text[], %(channels)s::text[], %(chats)s::text[]) WITH ORDINALITY AS q(session, channel,
    chat_id, at)
LEFT JOIN session_heads h ON h.agent = %(agent)s AND h.channel = q.channel AND h.chat_id = q.chat_id
ORDER BY q.at
"""
"""Each session's head, its two sources' watermarks and whether it has an archive, read under its lock (first: the
records read after it are at least as new)."""
_READ = """
SELECT q.at, r.seq, r.record::text, md5(r.record::text)
FROM unnest(%(ats)s::int[], %(channels)s::text[], %(chats)s::text[], %(froms)s::bigint[]) AS q(at, channel, chat_id,
    from_)
JOIN {table} r ON r.agent = %(agent)s AND r.channel = q.channel AND r.chat_id = q.chat_id AND r.seq >= q.from_
ORDER BY q.at, r.seq
"""
"""The sources' records from their last indexed one on (a tool result's tool_use; its digest: still the same?)."""
_STARTS = """
SELECT q.at,
       (SELECT min(seq) FROM {table} t WHERE t.agent = %(agent)s AND t.channel = q.channel AND t.chat_id = q.chat_id),
       (SELECT md5(record::text) FROM {table} t WHERE t.agent = %(agent)s AND t.channel = q.channel
        AND t.chat_id = q.chat_id AND t.seq = q.first)
FROM unnest(%(ats)s::int[], %(channels)s::text[], %(chats)s::text[], %(firsts)s::bigint[]) AS q(at, channel, chat_id,
    first)
"""
"""Whether each resumed source still starts with its first indexed record."""
_WATERMARKS = """
INSERT INTO search_sources AS w (agent, kind, session, name, watermark, head)
SELECT %(agent)s, k, s, '', m, h FROM unnest(%(kinds)s::text[], %(sessions)s::text[], %(marks)s::text[],
    %(heads)s::text[]) AS u(k, s, m, h)
ON CONFLICT (agent, kind, session, name) DO UPDATE SET watermark = EXCLUDED.watermark, head = EXCLUDED.head
"""
TABLES = {HISTORY: "session_records", ARCHIVE: "session_archive"}


@dataclass
class Mark(JsonWatermark):
    """A session source's watermark: the first and last seq indexed with their records' digests, and the tool_use
    ids whose results were not indexed yet."""

    first: int = 0
    first_md5: str = ""
    last: int = -1
    last_md5: str = ""
    skipped: list[str] = field(default_factory=list)


@dataclass
class _Source:
    """One source of the batch: where it resumes (`mark`: None, nothing indexed yet) and what was read of it."""

    key: SessionKey
    ref: SourceRef
    mark: Mark | None
    head: str | None
    rows: list[tuple[int, str, str]] = field(default_factory=list)
    first_ok: bool = True

    @property
    def start(self) -> int:
        return self.mark.last + 1 if self.mark is not None else 0

    def added(self) -> bool:
        """True if records were read past the last one indexed."""
        return any(seq >= self.start for seq, _, _ in self.rows)

    def grew(self) -> bool:
        """True if the source is what was indexed, only longer (its first and last indexed records unchanged)."""
        if self.mark is None:
            return True
        last = next((r for r in self.rows if r[0] == self.mark.last), None)
        return self.first_ok and last is not None and last[2] == self.mark.last_md5

    def new_mark(self, skipped: list[str]) -> Mark:
        new = Mark(skipped=skipped[-KEEP_SKIPPED:])
        old = self.mark
        if old is not None:
            new.first, new.first_md5, new.last, new.last_md5 = old.first, old.first_md5, old.last, old.last_md5
        elif self.rows:
            new.first, new.first_md5 = self.rows[0][0], self.rows[0][2]
        if self.rows:
            new.last, new.last_md5 = self.rows[-1][0], self.rows[-1][2]
        return new


State = tuple[str | None, str | None, bool]
"""What `_STATE` tells of a session besides its head: its history's and archive's watermarks, whether it has an
archive."""


@dataclass(frozen=True)
class Caught:
    """What a batch did: the docs added, the sessions left out as rewritten (to be indexed again on their own), the
    state the others are left in, and the agent's pending docs after it (None: nothing written)."""

    added: int
    rewritten: list[SessionKey]
    states: dict[str, State]
    pending: int | None


async def catch_up_batch(
    conn: Conn, agent: str, keys: Sequence[SessionKey], make_docs: DocMaker, known: Mapping[str, State] | None = None
) -> Caught:
    """Catch `keys` (sessions of `agent`) up in the caller's transaction (`Caught`). `known`: the state this
    instance left sessions in: their records are read with their state, in the same round trip (read again when
    the state found is another)."""
    ordered = sorted(set(keys), key=str)
    names = [str(k) for k in ordered]
    params = {"agent": agent, "sessions": names, "channels": [k.channel for k in ordered]}
    params["chats"] = [k.chat_id for k in ordered]
    known = known or {}
    await conn.execute(_LOCK, params)
    cursor = await conn.execute(_STATE, params)
    guessed = {k: _sources(k, known[str(k)], set()) for k in ordered if str(k) in known}
    collect = await _send(conn, agent, [s for mine in guessed.values() for s in mine])
    rows = await cursor.fetchall()
    await collect()
    sources: list[_Source] = []
    again: list[_Source] = []
    rewritten: set[SessionKey] = set()
    states: dict[str, State] = {}
    for key, (head, history, archive, has_archive) in zip(ordered, rows, strict=True):
        state = states[str(key)] = (history, archive, bool(has_archive))
        mine = guessed.get(key) if known.get(str(key)) == state else None
        if mine is None:
            mine = _sources(key, state, rewritten)
            again += mine
        for source in mine:
            source.head = None if head is None else str(head)
        sources += mine
    await (await _send(conn, agent, [s for s in again if s.key not in rewritten]))()
    rewritten |= {s.key for s in sources if not s.grew()}
    kept = [s for s in sources if s.key not in rewritten]
    made = await asyncio.to_thread(_docs, kept, make_docs)
    batch = [(s.ref, docs) for s, (docs, _) in zip(kept, made, strict=True) if docs]
    counted = await insert_batch(conn, agent, batch)
    marks = [(s, s.new_mark(skipped).dump()) for s, (_, skipped) in zip(kept, made, strict=True)]
    marks = [(s, m) for s, m in marks if s.ref.kind == HISTORY or s.added()]  # an archive untouched keeps its mark
    if marks:
        await conn.execute(
            _WATERMARKS,
            {
                "agent": agent,
                "kinds": [s.ref.kind for s, _ in marks],
                "sessions": [s.ref.session for s, _ in marks],
                "marks": [m for _, m in marks],
                "heads": [s.head if s.ref.kind == HISTORY else None for s, _ in marks],
            },
        )
    pending = await pending_after(counted)  # read once the watermarks are sent too
    for s, m in marks:
        history, archive, has_archive = states[s.ref.session]
        states[s.ref.session] = (m, archive, has_archive) if s.ref.kind == HISTORY else (history, m, has_archive)
    left = {name: state for name, state in states.items() if SessionKey.parse(name) not in rewritten}
    return Caught(sum(len(docs) for _, docs in batch), sorted(rewritten, key=str), left, pending)


def _sources(key: SessionKey, state: State, rewritten: set[SessionKey]) -> list[_Source]:
    """The session's sources to read as its state has them (a damaged watermark: the key added to `rewritten`)."""
    history, archive, has_archive = state
    sources = []
    for kind, text, wanted in ((HISTORY, history, True), (ARCHIVE, archive, archive is not None or has_archive)):
        mark = Mark.parse(text)
        if text is not None and mark is None:
            rewritten.add(key)  # a damaged watermark: the session is indexed again on its own
        if wanted:
            resume = mark if mark is not None and mark.last >= 0 else None  # None: nothing of it indexed yet
            sources.append(_Source(key, SourceRef(kind, str(key)), resume, None))
    return sources


async def _send(conn: Conn, agent: str, sources: list[_Source]) -> Callable[[], Awaitable[None]]:
    """Send the reads of each source's records from its last indexed one on, and of whether it still starts where
    it did (pipelined); the returned call waits for them and keeps them in the sources."""
    reads, starts = [], []
    for kind, table in TABLES.items():
        mine = [(at, s) for at, s in enumerate(sources) if s.ref.kind == kind]
        if not mine:
            continue
        base = {"agent": agent, "ats": [at for at, _ in mine], "channels": [s.key.channel for _, s in mine]}
        base["chats"] = [s.key.chat_id for _, s in mine]
        froms = [s.mark.last if s.mark is not None else 0 for _, s in mine]
        reads.append(await conn.execute(_READ.format(table=table), base | {"froms": froms}))
        resumed = [(at, s, s.mark) for at, s in mine if s.mark is not None]
        if resumed:
            check = {"agent": agent, "ats": [at for at, _, _ in resumed], "firsts": [m.first for _, _, m in resumed]}
            check["channels"] = [s.key.channel for _, s, _ in resumed]
            check["chats"] = [s.key.chat_id for _, s, _ in resumed]
            starts.append(await conn.execute(_STARTS.format(table=table), check))

    async def collect() -> None:
        for cursor in reads:
            for at, seq, record, md5 in await cursor.fetchall():
                sources[at].rows.append((int(seq), str(record), str(md5)))
        for cursor in starts:
            for at, least, first_md5 in await cursor.fetchall():
                mark = sources[at].mark
                sources[at].first_ok = mark is not None and least == mark.first and first_md5 == mark.first_md5

    return collect


def _docs(sources: list[_Source], make_docs: DocMaker) -> list[tuple[list[SearchDoc], list[str]]]:
    """Each source's new docs and skipped ids (on a worker thread: parsing and tokenising)."""
    made: list[tuple[list[SearchDoc], list[str]]] = []
    for s in sources:
        skipped = list(s.mark.skipped) if s.mark is not None else []
        if not s.added():
            made.append(([], skipped))
            continue
        records = [(seq, rec) for seq, text, _ in s.rows if isinstance(rec := parse_record(text), dict)]
        made.append(make_docs(s.ref, records, s.start, skipped))
    return made


def parse_record(text: str) -> object:
    try:
        return jsonsafe.loads(text)
    except ValueError:
        return None
