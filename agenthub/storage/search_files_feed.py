"""The files backend's search feed: keeps an agent's files index level with its JSONL histories, archives and
memory files (worker thread only).

Each source's watermark records the file's inode, size and mtime plus a signature of what was read (a digest of
its head, its last bytes, the next line number), so an append is indexed by reading only the new bytes, a
rewritten file (compaction's atomic replace) is indexed again from the start, and a restart (or a rebuilt index,
which has no watermarks) catches up with whatever changed while nothing was watching: the files are the queue.
How a record or a memory file becomes docs (tokenising) is the search package's, handed in (`DocReaders`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from agenthub.session_keys import SessionKey, key_from_file_stem
from agenthub.storage.history_handover import HEAD_BYTES, TAIL_BYTES, Appended
from agenthub.storage.jsonl import parse_line
from agenthub.storage.paths import AgentLayout
from agenthub.storage.search_files import FileSearchIndexStore, OnOpen
from agenthub.storage.search_index import ARCHIVE, HISTORY, MEMORY, JsonWatermark, SearchDoc, SourceRef

log = structlog.get_logger(__name__)

_HEAD_BYTES = HEAD_BYTES
_TAIL_BYTES = TAIL_BYTES
_KEEP_SKIPPED = 64  # unindexed tool_use ids remembered past a batch (their result comes in the next records)

if TYPE_CHECKING:
    from agenthub.storage.ports import Built, SearchKit
    from agenthub.storage.search_sqlite import SqliteSearchIndex


class FilesSearch:
    """The files' search port: an index per agent beside the data files, fed from them by `feeder`."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def open(self, kit: SearchKit[Built]) -> Built:
        return kit.beside_files(self.data_dir)

    def feeder(self, readers: DocReaders) -> FileFeeder:
        """What reads the histories, archives and memory files into an agent's index (`readers` make the docs)."""
        return FileFeeder(self.data_dir, readers)

    def index_store(self, on_open: OnOpen) -> FileSearchIndexStore:
        """The per-agent SQLite indexes (`on_open`: called on the worker when one is opened, to catch up)."""
        return FileSearchIndexStore(self.data_dir, on_open=on_open)


class RecordDocs(Protocol):
    """Turns a source's records into docs, in order (`search.docs.RecordReader`); `skipped`: the tool_use ids whose
    results are not indexed, carried over to the next batch."""

    skipped: list[str]

    def doc(self, source: SourceRef, seq: int, record: dict[str, Any]) -> SearchDoc | None: ...


class DocReaders(Protocol):
    """What the search package hands the feed: how records and memory files become docs."""

    def records(self, skipped: Iterable[str]) -> RecordDocs: ...

    def memory(self, source: SourceRef, text: str, ts: int | None) -> list[SearchDoc]: ...


@dataclass
class _Mark(JsonWatermark):
    """A JSONL source's watermark."""

    ino: int = 0
    size: int = -1
    mtime_ns: int = 0
    offset: int = 0
    head: str = ""
    tail: str = ""
    next: int = 0
    hidden: int = 0  # lines below this one are never indexed again (a deleted session's leftover archive)
    skipped: list[str] = field(default_factory=list)

    def dump(self) -> str:
        return json.dumps(vars(self))  # its fields are flat: what `asdict` gives, without its deep copy

    @property
    def stat(self) -> tuple[int, int, int]:
        return self.ino, self.size, self.mtime_ns


class FileFeeder:
    """Reads an agent's files into its index."""

    def __init__(self, data_dir: Path, readers: DocReaders) -> None:
        self.data_dir = data_dir
        self.readers = readers
        self._layouts: dict[str, AgentLayout] = {}
        self.sessions_read = 0
        """How many times a session's files were read to update an index (a statistic)."""
        self.handed_over = 0
        """Appends indexed from the writer's hand-over, without reading the file (a statistic)."""

    def catch_up(self, agent: str, index: SqliteSearchIndex, stop: Callable[[], bool] = lambda: False) -> int:
        """Bring every history and archive file up to date (one stat for an unchanged file); drop vanished ones.
        Returns the number of files looked at."""
        marks = index.watermarks()
        seen: set[SourceRef] = set()
        for path, source in self._jsonl_files(agent):
            if stop():
                return len(seen)
            seen.add(source)
            self.sync_jsonl(index, path, source, marks.get(source))
        for source in marks:
            if source.kind != MEMORY and source not in seen:
                index.drop_source(source)
        return len(seen)

    def _jsonl_files(self, agent: str) -> Iterator[tuple[Path, SourceRef]]:
        layout = AgentLayout(self.data_dir, agent)
        for directory, kind in ((layout.sessions_dir, HISTORY), (layout.archive_dir, ARCHIVE)):
            if not directory.is_dir():
                continue
            for path in sorted(directory.glob("*.jsonl")):
                key = key_from_file_stem(path.stem)
                if key is not None and key.agent == agent:
                    yield path, SourceRef(kind, str(key))

    def sync_session(self, index: SqliteSearchIndex, key: SessionKey, op: str, handed: Sequence[Appended] = ()) -> None:
        """After `op` landed on `key`'s files: index what changed; a delete takes the session out of the index. An
        append only writes the history (the archive changes with a replace, clear or delete, each heard too, and a
        restart catches up with every file). `handed`: the writer's hand-overs of the appends since (in order),
        indexed as they are while each one starts exactly where the watermark ends; the file is read only when
        one does not (another writer, a rewrite, a restart, a missed or replayed append)."""
        self.sessions_read += 1
        history, archive = SourceRef(HISTORY, str(key)), SourceRef(ARCHIVE, str(key))
        mark = index.watermark(history)
        if op == "append" and handed:
            mark = self._take_handed(index, history, mark, handed)
            if mark is None:
                self.handed_over += len(handed)
                return
        layout = self._layout(key.agent)
        rewritten = op in ("replace", "clear", "delete")
        self.sync_jsonl(index, layout.history_file(key), history, mark, rewritten=rewritten)
        if op != "append":
            self.sync_jsonl(index, layout.archive_file(key), archive, index.watermark(archive))
        if op == "delete":
            self._hide(index, archive)

    def _take_handed(
        self, index: SqliteSearchIndex, source: SourceRef, mark_text: str | None, handed: Sequence[Appended]
    ) -> str | None:
        """Index the hand-overs that continue the watermark exactly (each starts at its offset, on the file it
        last saw, unchanged since: same inode, size and mtime), in one `add`. Returns None when all of them did,
        else the watermark the file is to be read from (the last one taken, or the one given)."""
        old = _Mark.parse(mark_text)
        fresh = old is None  # a new file: its first lines are handed over from offset 0
        if old is None:
            if handed[0].start != 0:
                return mark_text
            old = _Mark(*handed[0].before)
        mark, reader, docs = old, None, []
        for item in handed:
            if item.before != mark.stat or item.start != mark.offset or not item.payload.endswith(b"\n"):
                break
            head = mark.head if mark.offset >= _HEAD_BYTES else (_digest(item.head) if item.head is not None else None)
            if head is None:
                break
            reader = reader or self.readers.records(mark.skipped)
            found, line = _parse(reader, source, item.payload, mark.next, mark.hidden)
            docs.extend(found)
            ino, size, mtime_ns = item.after
            mark = _Mark(ino, size, mtime_ns, item.end, head, item.tail.hex(), line, mark.hidden)
            mark.skipped = reader.skipped[-_KEEP_SKIPPED:]
        else:
            self._store(index, source, docs, mark.dump(), fresh=fresh)
            return None
        if mark is old:
            return mark_text
        text = mark.dump()
        self._store(index, source, docs, text, fresh=fresh)
        return text

    @staticmethod
    def _store(index: SqliteSearchIndex, source: SourceRef, docs: list[SearchDoc], mark: str, *, fresh: bool) -> None:
        if fresh:
            index.replace_source(source, docs, mark)
        else:  # the lines start at the watermark: their line numbers are past every doc stored for the source
            index.add(source, docs, mark, past_mark=True)

    def _layout(self, agent: str) -> AgentLayout:
        """The agent's paths (kept: its root is resolved once; each path is still checked for links when asked)."""
        layout = self._layouts.get(agent)
        if layout is None:
            layout = self._layouts[agent] = AgentLayout(self.data_dir, agent)
        return layout

    def purge(self, index: SqliteSearchIndex, keys: Iterable[SessionKey]) -> None:
        """After these sessions' files were deleted or redacted ("forget me", memory files scrubbed): index them
        again from what the files now hold, then leave no copy of the old text in the database file."""
        marks = index.watermarks()
        for key in keys:
            layout = AgentLayout(self.data_dir, key.agent)
            for path, kind in ((layout.history_file(key), HISTORY), (layout.archive_file(key), ARCHIVE)):
                ref = SourceRef(kind, str(key))
                self.sync_jsonl(index, path, ref, marks.get(ref), rewritten=True)
        for source, mark in marks.items():
            if source.kind != MEMORY:
                continue
            path = json.loads(mark).get("path")
            if path:
                self.sync_memory(index, source, Path(path), force=True)
            else:
                index.drop_source(source)
        index.purge()

    def sync_jsonl(
        self, index: SqliteSearchIndex, path: Path, source: SourceRef, mark_text: str | None, *, rewritten: bool = False
    ) -> None:
        old = _Mark.parse(mark_text)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            if mark_text is not None:
                index.drop_source(source)
            return
        with closing(os.fdopen(fd, "rb")) as file:
            st = os.fstat(fd)
            if old is not None and not rewritten and (st.st_ino, st.st_size, st.st_mtime_ns) == old.stat:
                return
            resumed = old if old is not None and not rewritten and _continues(fd, st.st_size, old) else None
            start, first = (resumed.offset, resumed.next) if resumed is not None else (0, 0)
            file.seek(start)
            data = file.read(max(0, st.st_size - start))
            consumed = data[: data.rfind(b"\n") + 1]
            offset = start + len(consumed)
            mark = _Mark(
                st.st_ino,
                st.st_size,
                st.st_mtime_ns,
                offset,
                _head(fd, resumed, start, consumed),
                _tail(fd, offset, consumed),
                hidden=old.hidden if old is not None else 0,
            )
        reader = self.readers.records(resumed.skipped if resumed is not None else ())
        docs, mark.next = _parse(reader, source, consumed, first, mark.hidden)
        mark.skipped = reader.skipped[-_KEEP_SKIPPED:]
        if resumed is None:
            index.replace_source(source, docs, mark.dump())
        else:
            index.add(source, docs, mark.dump())

    def sync_memory(self, index: SqliteSearchIndex, source: SourceRef, path: Path, *, force: bool = False) -> None:
        """Index a memory file again if it changed (one stat when it did not); drop it when it is gone."""
        mark = None if force else index.watermark(source)
        try:
            st = path.stat()
        except FileNotFoundError:
            index.drop_source(source)
            return
        old = json.loads(mark) if mark else None
        stat = [st.st_ino, st.st_size, st.st_mtime_ns]
        if old is not None and old.get("stat") == stat:
            return
        text = path.read_text(encoding="utf-8", errors="replace")
        docs = self.readers.memory(source, text, st.st_mtime_ns // 1_000_000)
        index.replace_source(source, docs, json.dumps({"path": str(path), "stat": stat}))

    def _hide(self, index: SqliteSearchIndex, archive: SourceRef) -> None:
        """A deleted session's archive that is still there (a delete cut short): never indexed again."""
        mark = _Mark.parse(index.watermark(archive))
        if mark is None:
            return
        mark.hidden = mark.next
        index.replace_source(archive, [], mark.dump())


def _parse(reader: RecordDocs, source: SourceRef, data: bytes, first: int, hidden: int) -> tuple[list[SearchDoc], int]:
    docs: list[SearchDoc] = []
    for number, line in enumerate(data.split(b"\n")[:-1], start=first):
        record = parse_line(line)
        if record is None:
            if number >= hidden and line.strip():  # damaged (a blank line is nothing); its number, never its text
                log.warning("search_line_corrupt", kind=source.kind, session=source.session, line=number + 1)
            continue
        doc = reader.doc(source, number, record)
        if doc is not None and number >= hidden:
            docs.append(doc)
    return docs, first + data.count(b"\n")


def _head(fd: int, resumed: _Mark | None, start: int, consumed: bytes) -> str:
    """The digest of the file's first `_HEAD_BYTES` up to the new offset: the resumed mark's when it already covered
    them (`_continues` checked it), else from the bytes just read when they start the file, else read again."""
    offset = start + len(consumed)
    if resumed is not None and resumed.offset >= _HEAD_BYTES:
        return resumed.head
    if start == 0:
        return _digest(consumed[:_HEAD_BYTES])
    return _digest(os.pread(fd, min(_HEAD_BYTES, offset), 0))


def _tail(fd: int, offset: int, consumed: bytes) -> str:
    """The file's last `_TAIL_BYTES` before `offset` (the end of `consumed`), hex."""
    if len(consumed) >= _TAIL_BYTES:
        return consumed[-_TAIL_BYTES:].hex()
    return os.pread(fd, min(_TAIL_BYTES, offset), offset - min(_TAIL_BYTES, offset)).hex()


def _continues(fd: int, size: int, mark: _Mark) -> bool:
    """True if the file is still the one indexed up to the mark's offset, only longer (an append, not a rewrite)."""
    if size < mark.offset:
        return False
    head = _digest(os.pread(fd, min(_HEAD_BYTES, mark.offset), 0))
    tail_len = min(_TAIL_BYTES, mark.offset)
    return head == mark.head and os.pread(fd, tail_len, mark.offset - tail_len).hex() == mark.tail


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()
