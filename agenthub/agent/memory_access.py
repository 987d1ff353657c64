"""What request assembly and the memory tools need of the memory files: a protocol the memory layer's
`MemoryFiles` satisfies, so that `agent` never imports `memory` (memory builds on agent, not the reverse)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from agenthub.agent.definition import AgentDefinition
from agenthub.storage.keys import SessionKey


class MemoryFileWriter(Protocol):
    """The serialised read-modify-write of one memory file (`memory.files.MemoryWriter`)."""

    async def update(self, path: Path, change: Callable[[str], str]) -> str: ...


class ChatMemoryScope(Protocol):
    """Which MEMORY.md a chat reads: the agent-wide one ("agent") or its own ("chat")."""

    @property
    def memory(self) -> str: ...


class MemoryAccess(Protocol):
    """Where a chat's MEMORY.md and its sender's profile are, and the writer every change goes through."""

    @property
    def writer(self) -> MemoryFileWriter: ...

    def scope_for(self, agent: AgentDefinition, channel: str, chat_type: object = None) -> ChatMemoryScope: ...

    def memory_path(self, agent: AgentDefinition, key: SessionKey | None = None) -> Path: ...

    def profile_path(
        self, agent: AgentDefinition, key: SessionKey, sender_id: str, chat_type: object
    ) -> Path | None: ...


def read_or_empty(path: Path) -> str:
    """The file's text, or "" when it does not exist (blocking: call it in a worker thread)."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


async def read_memory_text(path: Path) -> str:
    """`read_or_empty` off the event loop."""
    return await asyncio.to_thread(read_or_empty, path)
