"""`[search.embeddings]` wired into a gateway: the client, the vectors' store of the deployment's backend, the
history's observer, the search's fusion and a catch-up at start and then hourly (one instance at a time)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agenthub.gateway.core import GatewayCore
    from agenthub.search.vectors import VectorIndex
    from agenthub.storage.ports import VectorStore

CATCH_UP_INTERVAL_S = 3600.0
"""How often every session is compared with its vectors (what was written while the endpoint was away and not
changed since), the first time as the timer starts; a changed session is embedded at once."""


def attach_vectors(gateway: GatewayCore, open_store: Callable[[], VectorStore] | None = None) -> VectorIndex | None:
    """Vectors for `gateway`'s search when `[search.embeddings]` is set (in the store `open_store` opens, the
    deployment's backend's; default: beside each agent's files index); None when it is not."""
    settings = gateway.settings.search.embeddings
    if not settings.enabled:
        return None
    from agenthub.search.embeddings import EmbeddingsClient  # numpy: loaded only when embeddings are on
    from agenthub.search.vectors import VectorIndex
    from agenthub.storage.search_vectors import FileVectorStore

    store: VectorStore = open_store() if open_store is not None else FileVectorStore(gateway.settings.data_dir)
    index = VectorIndex(EmbeddingsClient(settings), store, gateway.history.store)
    gateway.search.vectors = index
    gateway.history.observers.append(index.history_changed)

    async def catch_up() -> None:
        await index.catch_up(gateway.agents.names())

    gateway.timers.add("search_vectors_catch_up", CATCH_UP_INTERVAL_S, catch_up, lease="search-vectors", at_start=True)
    return index
