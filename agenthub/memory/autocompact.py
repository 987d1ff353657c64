"""AutoCompact: idle sessions with many messages are cut to their last few (archived first), optionally summarised."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from agenthub.agent.definition import AgentDefinition
from agenthub.errors import SessionBusyError
from agenthub.llm.tokens import estimate_tokens
from agenthub.memory import policy, thresholds
from agenthub.memory.consolidator import Consolidator, compaction_notice
from agenthub.session.keys import SessionKey, key_from_file_stem

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


class AutoCompact:
    """The periodic sweep. A session whose turn runs (or is queued) is skipped: the cut happens inside
    `gateway.exclusive`, which refuses busy sessions and holds off new turns until it is done."""

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
            async with gw.exclusive(key):
                history = await gw.history.load(key)
                if not self._too_big(agent, history):
                    return
                await self._compact(key, agent, len(history))
        except SessionBusyError:
            log.info("autocompact_skipped_busy", session_key=str(key))
        finally:
            if gw.sessions.get(key) is None and not gw.is_busy(key):
                gw.history.evict(key)  # a sweep must not leave every idle session cached

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

    async def _compact(self, key: SessionKey, agent: AgentDefinition, length: int) -> None:
        gw, memory = self.gateway, self.gateway.settings.memory
        keep = memory.autocompact_keep
        if policy.autocompact_summary(gw.settings, agent):
            provider, model = self.consolidator.provider_for(agent)
            if not provider.offline:
                if self.consolidator.deferred(key, length):  # a summary failed lately: leave it as it is
                    return
                result = await self.consolidator.run(
                    key,
                    agent,
                    reason="autocompact",
                    actor="autocompact",
                    provider=provider,
                    model=model,
                    tail_budget=self._tail_budget(agent),
                    keep=keep,
                )
                log.info("autocompact_summarised", session_key=str(key), status=result.status)
                if result.status == "done":
                    gw.notify_next_turn(key, compaction_notice(result))
                return
        result = await self.consolidator.truncate(
            key, keep=keep, tail_budget=self._tail_budget(agent), reason="autocompact", actor="autocompact"
        )
        log.info("autocompact_truncated", session_key=str(key), status=result.status, kept=result.kept)
        if result.status == "done":
            gw.notify_next_turn(key, compaction_notice(result))
