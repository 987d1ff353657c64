"""One benchmark run: the chats written through a gateway's own store into a fresh deployment (files, or a
PostgreSQL database), then every question asked of that gateway's memory search (and, with `text`, of the real
`memory_search` tool, its answer counted within the public benchmark's character budget)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agenthub.hosting.app import build_gateway
from agenthub.storage.stores import open_stores
from recall_data import store
from recall_data.budget import TextOutcome, evaluate_text
from recall_data.model import Conversation
from recall_data.probe import Probe, Searches, evaluate
from recall_data.score import Outcome
from tests.support.roots import make_settings

ProbeOf = Callable[[Searches], Probe]


async def measure(
    conversations: Sequence[Conversation], root: Path, probe_of: ProbeOf, *, dsn: str | None = None
) -> list[Outcome]:
    """`root`: a fresh directory for the deployment's files; `dsn`: keep the state in this (empty) database."""
    ranked, _ = await measure_both(conversations, root, probe_of, dsn=dsn, text=False)
    return ranked


async def measure_both(
    conversations: Sequence[Conversation], root: Path, probe_of: ProbeOf, *, dsn: str | None = None, text: bool = True
) -> tuple[list[Outcome], list[TextOutcome]]:
    """The ranked outcomes, and with `text` the tool's text answers counted within the budget."""
    overrides: dict[str, Any] = {"session": {"fsync": False}}
    if dsn is not None:
        overrides["store"] = {"backend": "postgres", "dsn": dsn}
    settings = make_settings(root, **overrides)
    stores = await open_stores(settings)
    try:
        async with build_gateway(settings, stores=stores) as gw:
            await store.write_all(gw.history, conversations)
            ranked = await evaluate(probe_of(gw.search), conversations)
            return ranked, (await evaluate_text(gw, conversations) if text else [])
    finally:
        await stores.aclose()
