"""Forget and usage: the rows naming a person name their tag instead (`/forget`, `agenthub forget`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agenthub.forget.redact import Person
from agenthub.forget.service import UsageHook
from agenthub.session_keys import SessionKey
from agenthub.storage.ports import UsageStore
from agenthub.storage.usage import Forgotten
from agenthub.usage.recorder import UsageRecorder
from agenthub.usage.spool import UsageSpool, forget_spool


def usage_hook(store: UsageStore, recorder: UsageRecorder | None = None, spools: Path | None = None) -> UsageHook:
    """Redact through `store`, after the calls `recorder` still holds are written and the spools dead processes left
    under `spools` are replayed into the store and deleted (so no row naming them comes back later)."""

    async def forget(person: Person, agents: Sequence[str], key: SessionKey | None) -> int:
        if recorder is not None:
            recorder.unname(person.channel, person.sender_id)
            recorder.recover()
            await recorder.flush()  # the recovered spools too
        elif spools is not None:
            await replay_dead_spools(store, spools)
        chat = key.chat_id if key is not None else None
        return await store.forget(Forgotten(person.channel, person.sender_id, person.tag, tuple(agents), chat))

    return forget


async def replay_dead_spools(store: UsageStore, root: Path) -> int:
    """Write the rows of dead processes' spools under `root` that `store` lacks, then delete those spools; how many
    rows were written (a forget then redacts them with the rest)."""
    written = 0
    for path, rows in UsageSpool(root).recover():
        missing = await store.unrecorded(rows)
        if missing:
            await store.add(missing)
            written += len(missing)
        forget_spool(path)
    return written
