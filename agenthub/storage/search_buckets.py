"""The files index's postings rows: a segment's terms hashed into `BUCKETS` buckets, one row per bucket that holds any.

A row packs every term of its bucket in one segment: the terms (sorted, joined by `SEP`), each term's posting count
(int32), then the doc ids and tfs of all of them, term after term (`IDS`, each term's doc ids ascending). A message
adds a few dozen postings and a segment a few hundred thousand, so a segment is a few thousand rows instead of a row
per distinct term: writing it, merging it and deleting it touch that many b-tree entries. A query term is looked up
in its bucket's row of each segment (`bucket_of`), a key of the rowid b-tree (`row_key`): one row read and a split
of the bucket's term list per segment.
"""

from __future__ import annotations

import heapq
import sqlite3
import zlib
from collections.abc import Iterable, Iterator, Sequence
from itertools import groupby
from typing import Any

import numpy as np

from agenthub.storage.search_topk import IDS, DocColumns, Ints

SEP = "\x1f"
"""Between a row's terms (no term holds it: terms are runs of letters, digits and joiners)."""
BUCKETS = 4096
"""Buckets per segment (a power of two, below 2**16: a row's key is its segment's number * 2**16 + its bucket)."""
_SHIFT = 16

INSERT_ROW = "INSERT INTO postings(key, terms, counts, docs, tfs) VALUES (?, ?, ?, ?, ?)"
Row = tuple[int, str, bytes, bytes, bytes]
"""A postings row: key, terms, counts, doc ids, tfs."""


def bucket_of(term: str) -> int:
    """The term's bucket (the same in every process: a CRC of its UTF-8, not Python's salted hash)."""
    return zlib.crc32(term.encode()) & (BUCKETS - 1)


def row_key(seg: int, bucket: int) -> int:
    return (seg << _SHIFT) | bucket


def seg_keys(seg: int) -> tuple[int, int]:
    """The segment's rows' keys: [low, high)."""
    return seg << _SHIFT, (seg + 1) << _SHIFT


def rows_of(seg: int, names: Sequence[str], term_ranks: Any, docs: Ints, tfs: Ints) -> Iterator[Row]:
    """A new segment's rows from its postings: `term_ranks[i]` is posting i's term as an index into `names` (sorted),
    the postings in the order they were added (a term's doc ids ascending)."""
    if not len(docs):
        return
    buckets = np.fromiter((bucket_of(name) for name in names), np.int64, len(names))
    key = buckets[term_ranks] * len(names) + term_ranks
    order = np.argsort(key, kind="stable")  # stable: each term's doc ids stay ascending, as they were added
    key = key[order]
    doc_bytes, tf_bytes = docs[order].astype(IDS).tobytes(), tfs[order].astype(IDS).tobytes()
    starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))  # each term's first posting
    ranks = (key[starts] % len(names)).tolist()
    term_buckets = (key[starts] // len(names)).tolist()
    counts = np.diff(np.append(starts, len(key))).astype(IDS)
    firsts = np.flatnonzero(np.concatenate(([True], np.diff(term_buckets) != 0))).tolist()  # each bucket's first term
    bounds = np.append(starts, len(key)) * IDS.itemsize
    for a, b in zip(firsts, [*firsts[1:], len(ranks)], strict=True):
        lo, hi = int(bounds[a]), int(bounds[b])
        yield (
            row_key(seg, term_buckets[a]),
            SEP.join([names[r] for r in ranks[a:b]]),
            counts[a:b].tobytes(),
            doc_bytes[lo:hi],
            tf_bytes[lo:hi],
        )


def postings_in(row: Row, wanted: Iterable[str]) -> Iterator[tuple[str, Ints, Ints]]:
    """The postings (term, doc ids, tfs) of the `wanted` terms the row holds (each found by a search of the row's
    term text: no list of its terms is made)."""
    _, terms, counts, docs, tfs = row
    bounded = SEP + terms + SEP
    ends: Ints | None = None
    for term in wanted:
        at = bounded.find(SEP + term + SEP)
        if at < 0:
            continue
        i = bounded.count(SEP, 0, at)  # the term's place in the row
        if ends is None:
            ends = np.cumsum(np.frombuffer(counts, IDS), dtype=np.int64)
        lo, hi = (int(ends[i - 1]) if i else 0) * IDS.itemsize, int(ends[i]) * IDS.itemsize
        yield term, np.frombuffer(docs[lo:hi], IDS), np.frombuffer(tfs[lo:hi], IDS)


def _all_postings(row: Row) -> Iterator[tuple[str, Ints, Ints]]:
    """Every term's postings in the row, in its order."""
    _, terms, counts, docs, tfs = row
    doc_ids, term_tfs = np.frombuffer(docs, IDS), np.frombuffer(tfs, IDS)
    ends = np.cumsum(np.frombuffer(counts, IDS), dtype=np.int64).tolist()
    for name, lo, hi in zip(terms.split(SEP), [0, *ends[:-1]], ends, strict=True):
        yield name, doc_ids[lo:hi], term_tfs[lo:hi]


def merged(seg: int, bucket: int, parts: Sequence[Row], columns: DocColumns | None) -> Row | None:
    """One bucket's rows of several segments (in segment order, so ascending doc ids) as the new segment's row; with
    `columns`, only the postings of stored docs (None: none is left)."""
    if len(parts) == 1 and columns is None:
        return (row_key(seg, bucket), *parts[0][1:])
    joined: dict[str, tuple[list[Ints], list[Ints]]] = {}
    for part in parts:
        for term, docs_part, tfs_part in _all_postings(part):
            both = joined.setdefault(term, ([], []))
            both[0].append(docs_part)
            both[1].append(tfs_part)
    names: list[str] = []
    counts: list[int] = []
    doc_parts: list[Ints] = []
    tf_parts: list[Ints] = []
    for term in sorted(joined):
        ids, freqs = np.concatenate(joined[term][0]), np.concatenate(joined[term][1])
        if columns is not None:
            alive = columns.alive(ids)
            if not alive.all():
                ids, freqs = ids[alive], freqs[alive]
        if len(ids):
            names.append(term)
            counts.append(len(ids))
            doc_parts.append(ids)
            tf_parts.append(freqs)
    if not names:
        return None
    return (
        row_key(seg, bucket),
        SEP.join(names),
        np.array(counts, IDS).tobytes(),
        np.concatenate(doc_parts).astype(IDS).tobytes(),
        np.concatenate(tf_parts).astype(IDS).tobytes(),
    )


def postings_count(row: Row) -> int:
    return len(row[3]) // IDS.itemsize


def segment_rows(db: sqlite3.Connection, segs: Sequence[int]) -> Iterator[tuple[int, list[Row]]]:
    """The segments' rows, bucket by bucket: (bucket, its rows in the order of `segs`), read as one stream per segment
    (each in key order), merged here (no sort of the rows in SQLite)."""
    streams = [
        db.execute("SELECT key, terms, counts, docs, tfs FROM postings WHERE key >= ? AND key < ? ORDER BY key", keys)
        for keys in map(seg_keys, segs)
    ]
    rows: Iterator[Row] = heapq.merge(*streams, key=_bucket)  # equal buckets: in the order of `segs`
    for bucket, group in groupby(rows, key=_bucket):
        yield bucket, list(group)


def _bucket(row: Row) -> int:
    return row[0] & (BUCKETS - 1)


def seg_of(key: int) -> int:
    return key >> _SHIFT
