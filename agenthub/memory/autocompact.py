"""AutoCompact, the compaction of idle sessions: one with many messages is truncated to its last few (archived
first), or with `autocompact_summary` compacted with a summary."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from agenthub.agent.definition import AgentDefinition
from agenthub.errors import SessionBusyError
from agenthub.llm.tokens import estimate_tokens
from agenthub.llm.types import LLMProvider
from agenthub.memory import thresholds
from agenthub.memory.compaction import SessionCompactor, compaction_notice
from agenthub.memory.host import MemoryHost
from agenthub.session_keys import SessionKey

log = structlog.get_logger(__name__)


class AutoCompact:
    """The periodic sweep. The list of idle sessions is only a candidate list: right before a session is cut,
    under the session's own serialisation, it must still be idle (no turn running or waiting, no activity since
    `autocompact_idle_s`), or it is left whole. Truncation happens inside `host.exclusive`; with
    `autocompact_summary` the summary is the session's background work (the chat is not held while it is written)
    and is applied only if the session is still idle then; it ends with the sweep (a lost lease stops both)."""

    def __init__(self, host: MemoryHost, compactor: SessionCompactor) -> None:
        self.host = host
        self.compactor = compactor

    async def tick(self) -> None:
        for agent in list(self.host.agents()):
            await self.sweep_agent(agent)

    async def sweep_agent(self, agent: AgentDefinition) -> None:
        idle_before = self.host.clock() - self.host.settings.memory.autocompact_idle_s
        activity = await self.host.history.activity(agent.name)
        for key in sorted((a.key for a in activity if a.changed_at < idle_before), key=lambda k: k.file_stem):
            try:
                await self.compact_session(key, agent)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("autocompact_session_failed", session_key=str(key))

    async def compact_session(self, key: SessionKey, agent: AgentDefinition) -> None:
        host = self.host
        try:
            if host.background(key) is not None:
                raise SessionBusyError(f"session {key} is compacting")
            summary_model = self._summary_model(agent)
            if summary_model is None:
                await self._truncate(key, agent)
            else:
                await self._compact_with_summary(key, agent, *summary_model)
        except SessionBusyError:
            log.info("autocompact_skipped_busy", session_key=str(key))
        finally:
            self.host.release(key)  # a sweep must not leave every idle session cached

    async def still_idle(self, key: SessionKey) -> bool:
        """Re-checked right before a cut: nothing runs or waits in the session, and neither the live session nor
        the stored history has seen activity within `autocompact_idle_s`."""
        host = self.host
        idle_before = host.clock() - host.settings.memory.autocompact_idle_s
        if host.turn_pending(key):
            return False
        last_active = host.last_active(key)
        if last_active is not None and last_active >= idle_before:
            return False
        changed = [a.changed_at for a in await host.history.activity(key.agent) if a.key == key]
        return bool(changed) and changed[0] < idle_before

    def _too_big(self, agent: AgentDefinition, history: list[dict[str, Any]]) -> bool:
        """More than `autocompact_min_messages`, or (following the model's window) an estimated size at or
        over the agent's L2 threshold, which a session left idle right after a long paste can reach."""
        settings = self.host.settings
        if len(history) > settings.memory.autocompact_min_messages:
            return True
        threshold = thresholds.compact_at_tokens(settings, agent)
        return len(history) > 2 and estimate_tokens([m.get("content") for m in history]) >= threshold

    def _tail_budget(self, agent: AgentDefinition) -> int:
        settings = self.host.settings
        threshold = thresholds.compact_at_tokens(settings, agent)
        return int(threshold * thresholds.TAIL_SHARE)

    def _summary_model(self, agent: AgentDefinition) -> tuple[LLMProvider, str] | None:
        """The provider and model for the summary, or None for truncation (option off, or offline)."""
        if not thresholds.autocompact_summary(self.host.settings, agent):
            return None
        provider, model = self.compactor.provider_for(agent)
        return None if provider.offline else (provider, model)

    async def _truncate(self, key: SessionKey, agent: AgentDefinition) -> None:
        host = self.host
        async with host.exclusive(key):
            history = await host.history.load(key)
            if not self._too_big(agent, history) or not await self.still_idle(key):
                return
            result = await self.compactor.truncate(
                key,
                keep=host.settings.memory.autocompact_keep,
                tail_budget=self._tail_budget(agent),
                reason="autocompact",
                actor="autocompact",
            )
        log.info("autocompact_truncated", session_key=str(key), status=result.status, kept=result.kept)
        if result.status == "done":
            host.notify_next_turn(key, compaction_notice(result))

    async def _compact_with_summary(
        self, key: SessionKey, agent: AgentDefinition, provider: LLMProvider, model: str
    ) -> None:
        host = self.host
        if host.is_busy(key):
            raise SessionBusyError(f"session {key} is busy")
        history = await host.history.load(key)
        if not self._too_big(agent, history) or self.compactor.deferred(key, len(history)):
            return  # small, or a summary failed lately: leave it as it is
        if not await self.still_idle(key):
            raise SessionBusyError(f"session {key} is busy")
        task = host.start_background(key, self._summary_job(key, agent, provider, model))
        if task is not None:  # /restart, /stop or shutdown may cancel it; the sweep goes on with the next
            await _wait_owned(task)

    async def _summary_job(self, key: SessionKey, agent: AgentDefinition, provider: LLMProvider, model: str) -> None:
        host = self.host
        result = await self.compactor.run(
            key,
            agent,
            reason="autocompact",
            actor="autocompact",
            provider=provider,
            model=model,
            tail_budget=self._tail_budget(agent),
            keep=host.settings.memory.autocompact_keep,
            background=True,
            still_wanted=lambda: self.still_idle(key),
        )
        log.info("autocompact_summarised", session_key=str(key), status=result.status)
        if result.status == "done":
            host.notify_next_turn(key, compaction_notice(result))


async def _wait_owned(task: asyncio.Task[None]) -> None:
    """Wait for a summary the sweep started. The summary belongs to the sweep: a sweep cancelled (its lease lost,
    or shutdown) cancels it and waits until it has stopped, so nothing is applied once another instance leads."""
    try:
        await asyncio.wait([task])
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.wait([task])
        raise
