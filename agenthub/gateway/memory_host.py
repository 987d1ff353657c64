"""The gateway side of the memory layer: `GatewayMemoryHost` (the `memory.host.MemoryHost` a gateway offers), the
compactor the turn and the commands call, and `MemoryPlugIn`, the gateway's compaction plug-in the composition
root hands it at construction."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from agenthub import i18n
from agenthub.agent.definition import AgentDefinition
from agenthub.config import Settings
from agenthub.errors import LLMError
from agenthub.gateway.core import GatewayCore
from agenthub.gateway.runner import PendingTurn
from agenthub.gateway.turn import MESSAGE_TOO_LONG, OVERFLOW_AFTER_RETRY, TurnOutcome
from agenthub.llm.types import LLMProvider
from agenthub.memory.compaction import SessionCompactor
from agenthub.memory.files import MemoryFiles
from agenthub.memory.host import FinishedTurn
from agenthub.memory.wiring import AUTOCOMPACT_TIMER, L3_TIMER, MemoryLayer, build_memory_layer
from agenthub.session.history import SessionHistory
from agenthub.session_keys import SessionKey

Message = dict[str, Any]

MEMORY_LEASES = {L3_TIMER: "memory-l3", AUTOCOMPACT_TIMER: "memory-autocompact"}
"""The memory timers that are deployment singletons, by the lease each runs under (L2 runs after every turn)."""


class GatewayMemoryHost:
    """What the memory layer sees of one gateway (structurally a `MemoryHost`)."""

    def __init__(self, gateway: GatewayCore) -> None:
        self._gateway = gateway

    @property
    def settings(self) -> Settings:
        return self._gateway.settings

    @property
    def history(self) -> SessionHistory:
        return self._gateway.history

    @property
    def memory_files(self) -> MemoryFiles:
        return self._gateway.memory_files

    @property
    def llm_gate(self) -> AbstractAsyncContextManager[Any]:
        return self._gateway.llm_gate

    def clock(self) -> float:
        return self._gateway.clock()

    def agents(self) -> Sequence[AgentDefinition]:
        return list(self._gateway.agents.agents.values())

    def resolve_model(self, agent: AgentDefinition | None) -> tuple[LLMProvider, str]:
        providers = self._gateway.providers
        if agent is None:
            provider, model, _ = providers.resolve(None, None)
        else:
            provider, model, _ = providers.resolve(None, None, agent.config.provider, agent.config.model)
        return provider, model

    async def estimate_prompt_tokens(
        self, agent: AgentDefinition, key: SessionKey, sender_id: str, history: list[Message]
    ) -> int:
        gw = self._gateway
        tools = [*gw.tools.for_agent(agent), *gw.mcp.cached_tools(agent)]
        return await gw.context.estimate_prompt_tokens(agent, key, sender_id, history, tools)

    def notify_next_turn(self, key: SessionKey, text: i18n.Text) -> None:
        self._gateway.notify_next_turn(key, text)

    def is_busy(self, key: SessionKey) -> bool:
        return self._gateway.is_busy(key)

    def turn_pending(self, key: SessionKey) -> bool:
        state = self._gateway.sessions.get(key)
        return state is not None and (bool(state.queue) or state.current is not None)

    def last_active(self, key: SessionKey) -> float | None:
        session = self._gateway.sessions.get(key)
        return None if session is None else session.last_active

    def release(self, key: SessionKey) -> None:
        gw = self._gateway
        if gw.sessions.get(key) is None and not gw.is_busy(key):
            gw.history.evict(key)

    def exclusive(self, key: SessionKey) -> AbstractAsyncContextManager[None]:
        return self._gateway.exclusive(key)

    def hold(self, key: SessionKey) -> AbstractAsyncContextManager[None]:
        return self._gateway.hold(key)

    def start_background(self, key: SessionKey, work: Coroutine[Any, Any, None]) -> asyncio.Task[None] | None:
        return self._gateway.start_background(key, work)

    def background(self, key: SessionKey) -> asyncio.Task[None] | None:
        return self._gateway.background(key)


class GatewayCompactor:
    """The gateway's `Compactor`: manual runs answer with the memory layer's text; an overflow run that changed
    nothing becomes the turn's error (a retry could not help)."""

    def __init__(self, settings: Settings, compactor: SessionCompactor) -> None:
        self._settings = settings
        self.compactor = compactor

    async def compact(
        self,
        key: SessionKey,
        agent: AgentDefinition,
        *,
        reason: str,
        actor: str,
        focus: str = "",
        locale: str | None = None,
    ) -> str:
        if reason != "overflow":
            return await self.compactor.compact(key, agent, reason=reason, actor=actor, focus=focus, locale=locale)
        result = await self.compactor.compact_for_overflow(key, agent, actor=actor)
        if result.status == "nothing":  # the turn's own message is what does not fit
            raise LLMError("overflow compaction: nothing to compact", user_text=MESSAGE_TOO_LONG)
        if result.status != "done":
            raise LLMError(f"overflow compaction: {result.status}", user_text=OVERFLOW_AFTER_RETRY)
        return result.message.render(locale or i18n.locale_for(self._settings, key.channel, agent))


def finished_turn(pending: PendingTurn, outcome: TurnOutcome) -> FinishedTurn:
    """What memory reads of a turn that has just ended."""
    return FinishedTurn(
        key=pending.key,
        agent=pending.agent,
        sender_id=pending.message.sender_id,
        ok=outcome.ok,
        provider=outcome.provider,
        model=outcome.model,
        prompt_tokens=outcome.last_usage.prompt_tokens,
    )


class MemoryPlugIn:
    """The gateway's `CompactionPlugIn`: called by the gateway being constructed, it builds the memory layer on it
    (kept in `layer`, for the composition root's services) with the L2 after-turn hook and its timers, which start
    and stop with the gateway; L3 and AutoCompact run on one instance of the deployment at a time
    (`MEMORY_LEASES`). It gives the gateway the turns' compactor."""

    def __init__(self) -> None:
        self.layer: MemoryLayer | None = None

    def __call__(self, gateway: GatewayCore) -> GatewayCompactor:
        layer = self.layer = build_memory_layer(GatewayMemoryHost(gateway))
        compactor = layer.compactor

        async def after_turn(pending: PendingTurn, outcome: TurnOutcome) -> None:
            await compactor.after_turn(finished_turn(pending, outcome))

        gateway.after_turn_hooks.append(after_turn)
        for timer in layer.timers:
            gateway.timers.add(timer.name, timer.interval_s, timer.tick, lease=MEMORY_LEASES.get(timer.name))
        return GatewayCompactor(gateway.settings, compactor)
