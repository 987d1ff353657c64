"""Forget and usage: the rows naming a person name their tag instead (`/forget`, `agenthub forget`)."""

from __future__ import annotations

from collections.abc import Sequence

from agenthub.forget.redact import Person
from agenthub.forget.service import UsageHook
from agenthub.session_keys import SessionKey
from agenthub.storage.usage import Forgotten, UsageStore
from agenthub.usage.recorder import UsageRecorder


def usage_hook(store: UsageStore, recorder: UsageRecorder | None = None) -> UsageHook:
    """Redact through `store`, after the calls `recorder` still holds are written (so none names them later)."""

    async def forget(person: Person, agents: Sequence[str], key: SessionKey | None) -> int:
        if recorder is not None:
            await recorder.flush()
        chat = key.chat_id if key is not None else None
        return await store.forget(Forgotten(person.channel, person.sender_id, person.tag, tuple(agents), chat))

    return forget
