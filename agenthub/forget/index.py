"""The search index's part in "forget me": the seam `memory_search`'s index plugs into."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from agenthub.session_keys import SessionKey

IndexHook = Callable[[str, Sequence[SessionKey]], Awaitable[int]]
"""`(agent, redacted session keys) -> index entries or directories dropped`, called after the files are redacted."""


async def drop_derived_index(data_dir: Path, agent: str, keys: Sequence[SessionKey]) -> int:
    """Without a daemon (no live index to tell): remove `data/<agent>/index/` whole; it is derived from the redacted
    files and the next start rebuilds it. 1 when there was one, else 0. The daemon's forget uses
    `SearchService.purge` instead."""
    if not keys:
        return 0
    from agenthub.storage.search_files import remove_agent_index  # the index loads with search, not at start-up

    return 1 if await asyncio.to_thread(remove_agent_index, data_dir, agent) else 0
