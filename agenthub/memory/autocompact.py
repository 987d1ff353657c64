"""AutoCompact: idle sessions with many messages are cut to their last few (archived first), optionally summarised."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from agenthub.agent.definition import AgentDefinition
from agenthub.errors import SessionBusyError
from agenthub.llm.tokens import estimate_tokens
from agenthub.llm.types import LLMProvider
from agenthub.memory import policy, thresholds
from agenthub.memory.consolidator import Consolidator, compaction_notice
from agenthub.storage.keys import SessionKey, key_from_file_stem

if TYPE_CHECKING:
    from agenthub.gateway.core import GatewayCore

log = structlog.get_logger(__name__)


def idle_history_stems(sessions_dir: Path, idle_before: float) -> list[str]:
    """Stems of `*.jsonl` histories last modified before `idle_before` (epoch seconds)."""
    if not sessions_dir.is_dir():
        return []
    stems = []
    for path in sessions_dir.iterdir():
        if path.name.endswith(".jsonl") and path.is_file():
            try:
                if path.stat().st_mtime < idle_before:
                    stems.append(path.name[: -len(".jsonl")])
            except FileNotFoundError:
                continue
    return sorted(stems)


def history_mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None


class AutoCompact:
    """The periodic sweep. The list of idle sessions is only a candidate list: right before a session is cut,
    under the session's own serialisation, it must still be idle (no turn running or waiting, no activity since
    `autocompact_idle_s`), or it is left whole. Plain truncation happens inside `gateway.exclusive`; with
    `autocompact_summary` the summary is the session's background work (the chat is not held while it is written)
    and is applied only if the session is still idle then."""

    def __init__(self, gateway: GatewayCore, consolidator: Consolidator) -> None:
        self.gateway = gateway
        self.consolidator = consolidator

    async def tick(self) -> None:
        for agent in list(self.gateway.agents.agents.values()):
            await self.sweep_agent(agent)

    async def sweep_agent(self, agent: AgentDefinition) -> None:
        gw, memory = self.gateway, self.gateway.settings.memory
        sessions_dir = gw.history.layout(agent.name).sessions_dir
        stems = await asyncio.to_thread(idle_history_stems, sessions_dir, gw.clock() - memory.autocompact_idle_s)
        for stem in stems:
            key = key_from_file_stem(stem)
            if key is None or key.agent != agent.name:
                continue
            try:
                await self.compact_session(key, agent)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("autocompact_session_failed", session_key=str(key))

    async def compact_session(self, key: SessionKey, agent: AgentDefinition) -> None:
        gw = self.gateway
        try:
            if gw.background(key) is not None:
                raise SessionBusyError(f"session {key} is compacting")
            summary_model = self._summary_model(agent)
            if summary_model is None:
                await self._truncate(key, agent)
            else:
                await self._summarise(key, agent, *summary_model)
        except SessionBusyError:
            log.info("autocompact_skipped_busy", session_key=str(key))
        finally:
            if gw.sessions.get(key) is None and not gw.is_busy(key):
                gw.history.evict(key)  # a sweep must not leave every idle session cached

    async def still_idle(self, key: SessionKey) -> bool:
        """Re-checked right before a cut: nothing runs or waits in the session, and neither the live session nor
        the history file has seen activity within `autocompact_idle_s`."""
        gw = self.gateway
        idle_before = gw.clock() - gw.settings.memory.autocompact_idle_s
        session = gw.sessions.get(key)
        if session is not None and session.active_since(idle_before):
            return False
        mtime = await asyncio.to_thread(history_mtime, gw.history.layout(key.agent).history_file(key))
        return mtime is not None and mtime < idle_before

    def _too_big(self, agent: AgentDefinition, history: list[dict[str, Any]]) -> bool:
        """More than `autocompact_min_messages`, or (following the model's window) an estimated size at or
        over the agent's L2 threshold, which a session left idle right after a long paste can reach."""
        settings = self.gateway.settings
        if len(history) > settings.memory.autocompact_min_messages:
            return True
        threshold = policy.consolidate_at(settings, agent, thresholds.agent_model(settings, agent))
        return len(history) > 2 and estimate_tokens([m.get("content") for m in history]) >= threshold

    def _tail_budget(self, agent: AgentDefinition) -> int:
        settings = self.gateway.settings
        threshold = policy.consolidate_at(settings, agent, thresholds.agent_model(settings, agent))
        return int(threshold * policy.TAIL_SHARE)

    def _summary_model(self, agent: AgentDefinition) -> tuple[LLMProvider, str] | None:
        """The provider and model for the summary, or None for plain truncation (option off, or offline)."""
        if not policy.autocompact_summary(self.gateway.settings, agent):
            return None
        provider, model = self.consolidator.provider_for(agent)
        return None if provider.offline else (provider, model)

    async def _truncate(self, key: SessionKey, agent: AgentDefinition) -> None:
        gw = self.gateway
        async with gw.exclusive(key):
            history = await gw.history.load(key)
            if not self._too_big(agent, history) or not await self.still_idle(key):
                return
            result = await self.consolidator.truncate(
                key,
                keep=gw.settings.memory.autocompact_keep,
                tail_budget=self._tail_budget(agent),
                reason="autocompact",
                actor="autocompact",
            )
        log.info("autocompact_truncated", session_key=str(key), status=result.status, kept=result.kept)
        if result.status == "done":
            gw.notify_next_turn(key, compaction_notice(result))

    async def _summarise(self, key: SessionKey, agent: AgentDefinition, provider: LLMProvider, model: str) -> None:
        gw = self.gateway
        if gw.is_busy(key) or not await self.still_idle(key):
            raise SessionBusyError(f"session {key} is busy")
        history = await gw.history.load(key)
        if not self._too_big(agent, history) or self.consolidator.deferred(key, len(history)):
            return  # small, or a summary failed lately: leave it as it is
        task = gw.start_background(key, self._summary_job(key, agent, provider, model))
        if task is not None:  # /restart, /stop or shutdown may cancel it; the sweep goes on with the next
            await asyncio.wait([task])

    async def _summary_job(self, key: SessionKey, agent: AgentDefinition, provider: LLMProvider, model: str) -> None:
        gw = self.gateway
        result = await self.consolidator.run(
            key,
            agent,
            reason="autocompact",
            actor="autocompact",
            provider=provider,
            model=model,
            tail_budget=self._tail_budget(agent),
            keep=gw.settings.memory.autocompact_keep,
            background=True,
            still_wanted=lambda: self.still_idle(key),
        )
        log.info("autocompact_summarised", session_key=str(key), status=result.status)
        if result.status == "done":
            gw.notify_next_turn(key, compaction_notice(result))
