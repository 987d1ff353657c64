"""What the memory layer needs of the daemon that hosts it: a narrow protocol (the gateway's adapter lives in
`gateway/memory_host.py`; tests use a small fake), so memory never imports the gateway."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from agenthub import i18n
from agenthub.agent.definition import AgentDefinition
from agenthub.config import Settings
from agenthub.llm.types import LLMProvider
from agenthub.memory.files import MemoryFiles
from agenthub.session_keys import SessionKey
from agenthub.storage.store import SessionActivity

Message = dict[str, Any]


class MemoryHistory(Protocol):
    """The session histories, as far as memory reads and shrinks them (`session.history.SessionHistory`)."""

    async def load(self, key: SessionKey) -> list[Message]: ...

    async def replace(self, key: SessionKey, messages: list[Message]) -> list[Message]:
        """Archive what is left out, then make `messages` the working history; returns the archived messages."""
        ...

    def evict(self, key: SessionKey) -> None: ...

    async def activity(self, agent: str) -> list[SessionActivity]:
        """When each of `agent`'s histories last changed, newest first."""
        ...


@dataclass(frozen=True)
class FinishedTurn:
    """What the L2 after-turn decision reads of a turn that has just ended (its reply is already out)."""

    key: SessionKey
    agent: AgentDefinition
    sender_id: str
    ok: bool
    provider: LLMProvider | None
    model: str
    prompt_tokens: int
    """The real prompt size of the turn's last model call."""


@dataclass(frozen=True)
class TimerSpec:
    """A periodic job memory asks its host to run (started and stopped with the host, ticks never overlap)."""

    name: str
    interval_s: float
    tick: Callable[[], Awaitable[None]]


class MemoryHost(Protocol):
    """The sessions, models and scheduling memory works with; every member is used by memory."""

    @property
    def settings(self) -> Settings: ...

    @property
    def history(self) -> MemoryHistory: ...

    @property
    def memory_files(self) -> MemoryFiles: ...

    @property
    def llm_gate(self) -> AbstractAsyncContextManager[Any]:
        """Bounds the model calls running at once (turns and background work share it)."""
        ...

    def clock(self) -> float: ...

    def agents(self) -> Sequence[AgentDefinition]: ...

    def resolve_model(self, agent: AgentDefinition | None) -> tuple[LLMProvider, str]:
        """The provider and model `agent` talks to (the default ones for None)."""
        ...

    async def estimate_prompt_tokens(
        self, agent: AgentDefinition, key: SessionKey, sender_id: str, history: list[Message]
    ) -> int:
        """Our offline estimate of the prompt a turn of `agent` sends for `history` (system, messages, tools)."""
        ...

    def notify_next_turn(self, key: SessionKey, text: i18n.Text) -> None:
        """Tell the user on the session's next reply (a compaction they did not ask for is never silent)."""
        ...

    def is_busy(self, key: SessionKey) -> bool:
        """A turn runs or waits in the session, or its after-turn work, or someone holds it."""
        ...

    def turn_pending(self, key: SessionKey) -> bool:
        """A turn runs or waits in the session (a hold alone does not count)."""
        ...

    def last_active(self, key: SessionKey) -> float | None:
        """When the live session last saw activity (epoch seconds); None when it is not live."""
        ...

    def release(self, key: SessionKey) -> None:
        """Drop the session's cached history unless a live session or a turn still uses it."""
        ...

    def exclusive(self, key: SessionKey) -> AbstractAsyncContextManager[None]:
        """Hold the idle session (`SessionBusyError` if busy now); messages arriving meanwhile wait."""
        ...

    def hold(self, key: SessionKey) -> AbstractAsyncContextManager[None]:
        """Wait for the running turn to end, then keep the next one waiting until the block exits."""
        ...

    def start_background(self, key: SessionKey, work: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
        """Run `work` beside the session's turns, at most one per session (None, `work` closed, otherwise)."""
        ...

    def background(self, key: SessionKey) -> asyncio.Task[None] | None: ...
