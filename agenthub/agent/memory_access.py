"""What request assembly and the memory tools need of the memory files: a protocol the memory layer's
`MemoryFiles` satisfies, so that `agent` never imports `memory` (memory builds on agent, not the reverse)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from agenthub.agent.definition import AgentDefinition
from agenthub.session_keys import SessionKey
from agenthub.storage.memory_files import MemoryName


class MemoryFileWriter(Protocol):
    """The serialised read-modify-write of one memory file (`memory.files.MemoryWriter`)."""

    async def update(self, name: MemoryName, change: Callable[[str], str], *, keep_backup: bool = False) -> str: ...


class ChatMemoryScope(Protocol):
    """Which MEMORY.md a chat reads: the agent-wide one ("agent") or its own ("chat")."""

    @property
    def memory(self) -> str: ...


class MemoryAccess(Protocol):
    """Which MEMORY.md and profile a chat reads (by name), reading them, and the writer every change goes
    through."""

    @property
    def writer(self) -> MemoryFileWriter: ...

    def scope_for(self, agent: AgentDefinition, channel: str, chat_type: object = None) -> ChatMemoryScope: ...

    def memory_name(self, agent: AgentDefinition, key: SessionKey | None = None) -> MemoryName: ...

    def profile_name(
        self, agent: AgentDefinition, key: SessionKey, sender_id: str, chat_type: object
    ) -> MemoryName | None: ...

    async def read(self, name: MemoryName) -> str: ...

    async def read_many(self, names: Sequence[MemoryName], *, fresh_since: float | None = None) -> list[str]: ...

    def label(self, name: MemoryName) -> str: ...

    def file_of(self, name: MemoryName) -> Path | None: ...
