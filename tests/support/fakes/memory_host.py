"""A `MemoryHost` for unit tests of the memory layer without a gateway: histories and live sessions in memory, a
manual clock, and a model whose answers can be held at an event (the boundaries memory talks to)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

from agenthub import i18n
from agenthub.agent.definition import AgentConfig, AgentDefinition
from agenthub.clock import ManualClock
from agenthub.config import Settings
from agenthub.errors import SessionBusyError
from agenthub.llm.tokens import estimate_tokens
from agenthub.llm.types import LLMProvider, LLMRequest, LLMResponse, TextCallback
from agenthub.memory.files import MemoryFiles
from agenthub.session_keys import SessionKey
from agenthub.storage.store import SessionActivity
from tests.support.roots import make_settings

Message = dict[str, Any]


class HeldModel:
    """An `LLMProvider` answering every call with `answer`; while `gate` is clear, calls wait at it (each call
    sets `called` first), so a test can act while a summary is being written."""

    name = "fake"
    default_model = "fake-model"
    offline = False

    def __init__(self, answer: str = "the summary") -> None:
        self.answer = answer
        self.requests: list[LLMRequest] = []
        self.called = asyncio.Event()
        self.gate = asyncio.Event()
        self.gate.set()

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.requests.append(request)
        self.called.set()
        await self.gate.wait()
        return LLMResponse([{"type": "text", "text": self.answer}], "end_turn", model=request.model)

    async def stream(self, request: LLMRequest, on_text: TextCallback | None = None) -> LLMResponse:
        return await self.complete(request)

    async def warm_up(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    def knows_model(self, model: str) -> bool:
        return True


class MemoryOnlyHistory:
    """Working histories and archives in dicts; `changed_at` is the host clock's time of the last change."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.records: dict[SessionKey, list[Message]] = {}
        self.archives: dict[SessionKey, list[Message]] = {}
        self.changed_at: dict[SessionKey, float] = {}
        self.evicted: list[SessionKey] = []

    async def load(self, key: SessionKey) -> list[Message]:
        return copy.deepcopy(self.records.get(key, []))

    async def append(self, key: SessionKey, *messages: Message) -> None:
        self.records.setdefault(key, []).extend(copy.deepcopy(list(messages)))
        self.changed_at[key] = self.clock()

    async def replace(self, key: SessionKey, messages: list[Message]) -> list[Message]:
        old = self.records.get(key, [])
        removed = [m for m in old if m not in messages]
        self.archives.setdefault(key, []).extend(copy.deepcopy(removed))
        self.records[key] = copy.deepcopy(messages)
        self.changed_at[key] = self.clock()
        return removed

    def evict(self, key: SessionKey) -> None:
        self.evicted.append(key)

    async def activity(self, agent: str) -> list[SessionActivity]:
        found = [SessionActivity(k, t) for k, t in self.changed_at.items() if k.agent == agent]
        return sorted(found, key=lambda a: a.changed_at, reverse=True)


class FakeMemoryHost:
    """Structurally a `memory.host.MemoryHost`. `pending` marks sessions with a turn running or waiting, `live`
    the live sessions' last activity; `notices` collects what the next replies would carry."""

    def __init__(self, root: Path, *, memory: dict[str, Any] | None = None, model: HeldModel | None = None) -> None:
        self._settings: Settings = make_settings(root, memory=memory or {})
        self.clock = ManualClock()
        self._history = MemoryOnlyHistory(self.clock)
        self._files = MemoryFiles(self._settings.data_dir, self._settings.auth_dir)
        self._gate = asyncio.Semaphore(4)
        self.model = model or HeldModel()
        self.agent = AgentDefinition("default", AgentConfig(), "You are a test assistant.")
        self.notices: dict[SessionKey, list[i18n.Text]] = {}
        self.pending: set[SessionKey] = set()
        self.live: dict[SessionKey, float] = {}
        self._locks: dict[SessionKey, asyncio.Lock] = {}
        self._background: dict[SessionKey, asyncio.Task[None]] = {}

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def history(self) -> MemoryOnlyHistory:
        return self._history

    @property
    def memory_files(self) -> MemoryFiles:
        return self._files

    @property
    def llm_gate(self) -> AbstractAsyncContextManager[Any]:
        return self._gate

    def agents(self) -> Sequence[AgentDefinition]:
        return [self.agent]

    def resolve_model(self, agent: AgentDefinition | None) -> tuple[LLMProvider, str]:
        return self.model, self.model.default_model

    async def estimate_prompt_tokens(
        self, agent: AgentDefinition, key: SessionKey, sender_id: str, history: list[Message]
    ) -> int:
        return estimate_tokens([m.get("content") for m in history])

    def notify_next_turn(self, key: SessionKey, text: i18n.Text) -> None:
        self.notices.setdefault(key, []).append(text)

    def is_busy(self, key: SessionKey) -> bool:
        lock = self._locks.get(key)
        return key in self.pending or (lock is not None and lock.locked())

    def turn_pending(self, key: SessionKey) -> bool:
        return key in self.pending

    def last_active(self, key: SessionKey) -> float | None:
        return self.live.get(key)

    def release(self, key: SessionKey) -> None:
        if key not in self.live and not self.is_busy(key):
            self._history.evict(key)

    @asynccontextmanager
    async def exclusive(self, key: SessionKey) -> AsyncIterator[None]:
        if self.is_busy(key):
            raise SessionBusyError(f"session {key} is busy")
        async with self.hold(key):
            yield

    @asynccontextmanager
    async def hold(self, key: SessionKey) -> AsyncIterator[None]:
        async with self._locks.setdefault(key, asyncio.Lock()):
            yield

    def start_background(self, key: SessionKey, work: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
        if key in self._background:
            work.close()
            return None
        task = asyncio.create_task(work)
        self._background[key] = task
        task.add_done_callback(lambda _: self._background.pop(key, None))
        return task

    def background(self, key: SessionKey) -> asyncio.Task[None] | None:
        return self._background.get(key)
