"""One benchmark run: the chats written through the product's store into a fresh data dir, then every question
asked of the product's search service over that dir."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from agenthub.search.service import SearchService
from agenthub.session.history import SessionHistory
from recall_data import store
from recall_data.model import Conversation
from recall_data.probe import Probe, evaluate
from recall_data.score import Outcome

ProbeOf = Callable[[SearchService], Probe]


async def measure(conversations: Sequence[Conversation], data_dir: Path, probe_of: ProbeOf) -> list[Outcome]:
    history = SessionHistory(data_dir, fsync=False)
    await store.write_all(history, conversations)
    await history.aclose()
    service = SearchService(data_dir)
    try:
        return await evaluate(probe_of(service), conversations)
    finally:
        await service.close()
