"""One agent's vectors of one model held in memory for brute-force nearest neighbours: appended to as vectors are
stored, dropped (and read again on the next search) when any is removed. Used from one thread."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
from numpy.typing import NDArray

Vector = NDArray[np.float32]


class VectorCache:
    def __init__(self, model: str, dims: int) -> None:
        self.model = model
        self.dims = dims
        self._ids: list[int] = []
        self._session_of: list[int] = []
        self._sessions: list[str] = []
        self._session_index: dict[str, int] = {}
        self._chunks: list[Vector] = []

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, rows: Iterable[tuple[int, str, bytes]]) -> None:
        """(row id, session, float32 little-endian vector) rows; a vector of another length is left out."""
        blobs = []
        for row_id, session, blob in rows:
            if len(blob) != self.dims * 4:
                continue
            index = self._session_index.get(session)
            if index is None:
                index = self._session_index[session] = len(self._sessions)
                self._sessions.append(session)
            self._ids.append(row_id)
            self._session_of.append(index)
            blobs.append(blob)
        if blobs:
            self._chunks.append(np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), self.dims))

    def top(self, query: Vector, allowed: Callable[[str], bool], limit: int) -> list[tuple[int, float]]:
        """(row id, cosine) of the `limit` vectors nearest to `query` among the sessions `allowed` accepts."""
        if not self._ids or query.shape[0] != self.dims:
            return []
        if len(self._chunks) > 1:
            self._chunks = [np.concatenate(self._chunks)]
        permitted = np.fromiter((allowed(s) for s in self._sessions), dtype=bool, count=len(self._sessions))
        mask = permitted[np.asarray(self._session_of, dtype=np.intp)]
        scores = self._chunks[0] @ np.asarray(query, dtype=np.float32)
        scores = np.where(mask, scores, -np.inf)
        count = min(limit, int(mask.sum()))
        if count == 0:
            return []
        order = np.argpartition(-scores, count - 1)[:count] if count < len(scores) else np.arange(len(scores))
        order = order[np.argsort(-scores[order], kind="stable")]
        return [(self._ids[i], float(scores[i])) for i in order]
