"""What the HTTP API needs from the core: a narrow protocol the gateway meets, and the services built beside it."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from agenthub.agent.definition import AgentDefinition, AgentRegistry
from agenthub.config import Settings
from agenthub.session_keys import SessionKey

if TYPE_CHECKING:
    from agenthub.channel.inbox_flow import InboxSubmitter
    from agenthub.forget.service import Forgetter
    from agenthub.gateway.handle import ReplyHandle
    from agenthub.llm.registry import ProviderRegistry
    from agenthub.memory.files import MemoryFiles
    from agenthub.messages import InboundMessage
    from agenthub.scheduler.core import Scheduler
    from agenthub.search.api import Searcher
    from agenthub.session.history import SessionHistory
    from agenthub.storage.ports import IdempotencyStore
    from agenthub.usage.wiring import UsageServices


class ApiCompactor(Protocol):
    """Manual compaction (`POST …/compact`), when the memory layer is on."""

    async def compact(
        self,
        key: SessionKey,
        agent: AgentDefinition,
        *,
        reason: str,
        actor: str,
        focus: str = "",
        locale: str | None = None,
    ) -> str: ...


class ApiHost(Protocol):
    """The core as the API sees it: submit a message, and the stores and services the admin routes read."""

    @property
    def settings(self) -> Settings: ...
    @property
    def agents(self) -> AgentRegistry: ...
    @property
    def providers(self) -> ProviderRegistry: ...
    @property
    def history(self) -> SessionHistory: ...
    @property
    def memory_files(self) -> MemoryFiles: ...
    @property
    def search(self) -> Searcher: ...

    async def submit(self, message: InboundMessage) -> ReplyHandle: ...

    def is_busy(self, key: SessionKey) -> bool: ...

    def hold(self, key: SessionKey) -> AbstractAsyncContextManager[None]: ...

    async def cancel_background(self, key: SessionKey) -> bool: ...


@dataclass(frozen=True)
class ApiServices:
    """What every route is given: the host, and the two core services the composition root builds around it."""

    host: ApiHost
    forgetter: Callable[[], Forgetter]
    """A Forgetter over the daemon's live caches and memory writers (`POST /api/forget`)."""
    thresholds: Callable[[AgentDefinition], dict[str, Any]]
    """The memory thresholds the context meter shows for an agent."""
    inbox: InboxSubmitter
    """Where a chat request is stored before it is answered (and settled once its answer is in the session)."""
    idempotency: IdempotencyStore
    """The chat requests' `Idempotency-Key`s and their answers."""
    scheduler: Scheduler | None = None
    """The scheduled jobs (`/api/jobs`); None when `[scheduler]` is off."""
    compactor: ApiCompactor | None = None
    """Manual compaction (`POST …/compact`): the memory layer's; None when it is off."""
    usage: UsageServices | None = None
    """Usage records and budgets (`/api/usage`); None when usage is not recorded."""
