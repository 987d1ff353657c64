"""Compaction, the one way the working history shrinks: the older messages are summarised into one `[历史摘要]`
system message and cut (archived first); `truncate` is the cut without a summary.

Three callers: L2 after a turn that reached the agent's threshold, a request (`/compact`, the HTTP route), and a
turn whose request overflowed the model's window (the gateway's compactor, `gateway/memory_host.py`, turns an
overflow compaction that changed nothing into the turn's error). Requested and overflow compactions run while the
session is held (`host.exclusive`, or inside the turn itself). The after-turn one is the session's background work
(`host.start_background`, at most one per session): it summarises a snapshot without holding the session and
applies the result under `host.hold` only if messages were merely appended since; /restart, /stop and shutdown
cancel it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

import structlog

from agenthub import i18n
from agenthub.agent.definition import AgentDefinition
from agenthub.llm.tokens import estimate_tokens
from agenthub.llm.types import CallOwner, LLMProvider
from agenthub.memory import thresholds
from agenthub.memory.backoff import SummaryBackoff
from agenthub.memory.cut import Cut, plan_cut
from agenthub.memory.host import FinishedTurn, MemoryHost
from agenthub.memory.summary import SummaryError, summarise, summary_request
from agenthub.session_keys import SessionKey

log = structlog.get_logger(__name__)

Status = Literal["done", "nothing", "failed", "unavailable", "changed"]
Flush = Callable[[SessionKey, AgentDefinition, list[dict[str, Any]]], Awaitable[bool]]
"""Merges messages' durable facts into MEMORY.md; True when the file holds them, False when the rewrite was refused."""
Message = dict[str, Any]


@dataclass(frozen=True)
class CompactionResult:
    status: Status
    message: i18n.Text
    """What the user who asked for it is told (rendered in their chat's locale)."""
    cut: int = 0
    kept: int = 0
    archived: int = 0
    summary_chars: int = 0


def audit(now: float, key: SessionKey, *, reason: str, actor: str, cut: Cut, summary: str, archived: int) -> None:
    """One `compaction_audit` line per compaction: who, when, where the cut was, what was kept, summary size."""
    log.info(
        "compaction_audit",
        session_key=str(key),
        reason=reason,
        actor=actor,
        at=dt.datetime.fromtimestamp(now, dt.UTC).isoformat(),
        cut_index=cut.index,
        kept=len(cut.tail),
        archived=archived,
        summary_chars=len(summary),
    )


def summary_record(now: float, summary: str) -> Message:
    return {"role": "system", "content": summary, "timestamp": int(now * 1000), "kind": "summary"}


def compaction_notice(result: CompactionResult) -> i18n.Text:
    """What the user is told on their next reply after a compaction they did not ask for (never silent)."""
    how = "summarised" if result.summary_chars else "set_aside"
    return i18n.Text(f"compaction.notice.{how}", {"archived": result.archived, "kept": result.kept})


def _done(cut: Cut, summary: str) -> CompactionResult:
    text = i18n.Text("compaction.done", {"head": len(cut.head), "tail": len(cut.tail)})
    return CompactionResult("done", text, cut.index, len(cut.tail), len(cut.head), len(summary))


class SessionCompactor:
    """Compaction of one host's sessions: after a turn (L2), on request, on overflow, and AutoCompact's."""

    def __init__(self, host: MemoryHost, *, flush: Flush | None = None) -> None:
        self.host = host
        self.flush = flush
        """The memory flush run before a compaction takes messages out of the working history (not on overflow,
        which happens inside a turn the user is waiting for)."""
        self._factors: dict[SessionKey, float] = {}  # real tokens per estimated token, per session
        self.backoff = SummaryBackoff()

    def provider_for(self, agent: AgentDefinition) -> tuple[LLMProvider, str]:
        return self.host.resolve_model(agent)

    # ---- after a turn (L2) -----------------------------------------------------------------------

    async def after_turn(self, turn: FinishedTurn) -> None:
        """Start a background compaction when the turn's last model call reached the agent's threshold (the
        reply is already out; the chat goes on meanwhile). At most one runs per session."""
        provider = turn.provider
        if not turn.ok or provider is None:
            return
        threshold = thresholds.compact_at_tokens(self.host.settings, turn.agent, turn.model)
        if turn.prompt_tokens < threshold or self.host.background(turn.key) is not None:
            return
        history = await self.host.history.load(turn.key)
        if self.deferred(turn.key, len(history)):
            return
        self.host.start_background(turn.key, self._compact_after_turn(turn, history, threshold, provider))

    async def _compact_after_turn(
        self, turn: FinishedTurn, history: list[Message], threshold: int, provider: LLMProvider
    ) -> None:
        factor = await self._calibrate(turn, history)
        log.info(
            "consolidation_triggered", session_key=str(turn.key), prompt_tokens=turn.prompt_tokens, threshold=threshold
        )
        result = await self.run(
            turn.key,
            turn.agent,
            reason="threshold",
            actor="consolidator",
            provider=provider,
            model=turn.model,
            tail_budget=int(threshold * thresholds.TAIL_SHARE / factor),
            background=True,
        )
        if result.status == "done":
            self.host.notify_next_turn(turn.key, compaction_notice(result))

    def deferred(self, key: SessionKey, length: int) -> bool:
        """Automatic compaction of `key` waits after a failed summary (`memory.consolidate_retry_after_s`)."""
        retry_after_s = self.host.settings.memory.consolidate_retry_after_s
        return self.backoff.deferred(key, length, now=self.host.clock(), retry_after_s=retry_after_s)

    async def _calibrate(self, turn: FinishedTurn, history: list[Message]) -> float:
        """Compare the real prompt size with our estimate of the same request (the history without the reply)."""
        estimated = await self.host.estimate_prompt_tokens(turn.agent, turn.key, turn.sender_id, history[:-1])
        factor = thresholds.calibration(turn.prompt_tokens, estimated)
        self._factors[turn.key] = factor
        return factor

    # ---- compaction on request ------------------------------------------------------------------

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
        """Compaction on request (only when idle: `SessionBusyError` otherwise; `focus` steers the summary); returns
        what the user is told, in `locale` (the asking chat's) or else the chat's configured one."""
        provider, model = self.provider_for(agent)
        settings = self.host.settings
        locale = locale or i18n.locale_for(settings, key.channel, agent)
        if self.host.background(key) is not None:
            return i18n.text("compaction.running", locale)
        threshold = thresholds.compact_at_tokens(settings, agent, model)
        async with self.host.exclusive(key):
            result = await self.run(
                key,
                agent,
                reason=reason,
                actor=actor,
                provider=provider,
                model=model,
                tail_budget=int(threshold * thresholds.TAIL_SHARE / self._factors.get(key, 1.0)),
                focus=focus,
            )
        return result.message.render(locale)

    async def compact_for_overflow(self, key: SessionKey, agent: AgentDefinition, *, actor: str) -> CompactionResult:
        """The compaction a running turn asks for (it holds the session) after the model refused the request as
        too long, before its one retry: the kept tail is a smaller share of the window."""
        provider, model = self.provider_for(agent)
        settings = self.host.settings
        threshold = thresholds.compact_at_tokens(settings, agent, model)
        window = thresholds.window_of(settings, agent, model)
        budget = window * thresholds.OVERFLOW_TAIL_SHARE if window else threshold * thresholds.TAIL_SHARE
        tail_budget = int(budget / self._factors.get(key, 1.0))
        return await self.run(
            key, agent, reason="overflow", actor=actor, provider=provider, model=model, tail_budget=tail_budget
        )

    # ---- the compaction itself -------------------------------------------------------------------

    async def run(
        self,
        key: SessionKey,
        agent: AgentDefinition,
        *,
        reason: str,
        actor: str,
        provider: LLMProvider,
        model: str,
        tail_budget: int | None,
        keep: int | None = None,
        focus: str = "",
        background: bool = False,
        still_wanted: Callable[[], Awaitable[bool]] | None = None,
    ) -> CompactionResult:
        """Summarise all but the last `keep` messages of a snapshot of the history. Archive, then replace.

        In the foreground the caller holds the session. With `background`, the flush and the summary run without
        holding it and the result is applied under `gateway.hold` (after a running turn): only if the history still
        starts with the snapshot (messages were only appended since, and those are kept) and `still_wanted()`
        agrees; otherwise it is abandoned. Each model call is bounded by `memory.background_timeout_s`.
        """
        host, settings = self.host, self.host.settings
        fields = {"session_key": str(key), "reason": reason, "actor": actor}
        if provider.offline:
            log.info("compaction_skipped_offline", **fields)
            return CompactionResult("unavailable", i18n.Text("compaction.unavailable"))
        history = await host.history.load(key)
        cut = plan_cut(history, keep or thresholds.keep_recent(settings, agent), tail_budget)
        if cut is None:
            return CompactionResult("nothing", i18n.Text("compaction.nothing", {"count": len(history)}))
        if reason != "overflow":
            await self._flush_memory(key, agent, cut.head, fields)
        summary = await self._summary(key, agent, cut, provider, model, focus, len(history), fields)
        if summary is None:
            return CompactionResult("failed", i18n.Text("compaction.failed"))
        if not background:
            return await self._apply(key, history, cut, summary, fields, still_wanted, reason=reason, actor=actor)
        async with host.hold(key):  # a safe point: no turn runs while the summary replaces the head
            return await self._apply(key, history, cut, summary, fields, still_wanted, reason=reason, actor=actor)

    async def _summary(
        self,
        key: SessionKey,
        agent: AgentDefinition,
        cut: Cut,
        provider: LLMProvider,
        model: str,
        focus: str,
        length: int,
        fields: dict[str, str],
    ) -> str | None:
        """The `[历史摘要]` text, or None when the call failed, timed out or gave an unusable answer."""
        host, settings = self.host, self.host.settings
        threshold = thresholds.compact_at_tokens(settings, agent, model)
        window = thresholds.window_of(settings, agent, model) or 2 * threshold
        request = summary_request(
            model,
            cut.previous_summaries,
            cut.head,
            input_budget=int(window * 0.5),
            max_tokens=thresholds.summary_max_tokens(threshold),
            focus=focus,
        )
        request = replace(request, owner=CallOwner(agent.name, key.channel, key.chat_id))
        original = estimate_tokens(cut.previous_summaries) + estimate_tokens([m.get("content") for m in cut.head])
        try:
            async with host.llm_gate, asyncio.timeout(settings.memory.background_timeout_s):
                return await summarise(provider, request, original)
        except (SummaryError, TimeoutError) as e:
            error = str(e) if isinstance(e, SummaryError) else "summary call timed out"
            log.warning("consolidation_failed", error=error, **fields)
            self.backoff.failed(key, length, now=host.clock())
            return None

    async def _apply(
        self,
        key: SessionKey,
        snapshot: list[Message],
        cut: Cut,
        summary: str,
        fields: dict[str, str],
        still_wanted: Callable[[], Awaitable[bool]] | None,
        *,
        reason: str,
        actor: str,
    ) -> CompactionResult:
        """Replace the snapshot's head by the summary, keeping the tail and whatever was appended since."""
        host = self.host
        current = await host.history.load(key)
        unchanged = current[: len(snapshot)] == snapshot  # e.g. /restart cleared it while the summary was written
        if not unchanged or (still_wanted is not None and not await still_wanted()):
            log.warning("consolidation_abandoned_history_changed", **fields)
            self.backoff.settled(key)
            return CompactionResult("changed", i18n.Text("compaction.changed"))
        appended = current[len(snapshot) :]
        removed = await host.history.replace(key, [summary_record(host.clock(), summary), *cut.tail, *appended])
        self.backoff.settled(key)
        audit(host.clock(), key, reason=reason, actor=actor, cut=cut, summary=summary, archived=len(removed))
        return _done(cut, summary)

    async def _flush_memory(
        self, key: SessionKey, agent: AgentDefinition, head: list[Message], fields: dict[str, str]
    ) -> None:
        """Flush what an earlier failed attempt has not flushed yet (a retry of the same head flushes nothing)."""
        if self.flush is None or not self.host.settings.memory.flush_before_compaction:
            return
        fresh = self.backoff.unflushed(key, head)
        if not fresh:
            log.info("memory_flush_skipped_already_flushed", messages=len(head), **fields)
            return
        try:
            async with asyncio.timeout(self.host.settings.memory.background_timeout_s):
                settled = await self.flush(key, agent, fresh)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the summary still keeps the facts in the session; compaction goes on
            log.warning("memory_flush_failed", error=str(e), error_type=type(e).__name__, **fields)
            return
        if settled:  # a refused rewrite is not a flush: a retry must try these messages again
            self.backoff.flushed(key, head)

    async def truncate(
        self, key: SessionKey, *, keep: int, reason: str, actor: str, tail_budget: int | None = None
    ) -> CompactionResult:
        """Cut to the last `keep` messages (fewer if over `tail_budget` tokens) without a model call (earlier
        summaries stay); archive first."""
        history = await self.host.history.load(key)
        cut = plan_cut(history, keep, tail_budget)
        if cut is None:
            return CompactionResult("nothing", i18n.Text("compaction.nothing", {"count": len(history)}))
        summaries = [m for m in history[: cut.index] if m.get("role") == "system"]
        removed = await self.host.history.replace(key, [*summaries, *cut.tail])
        audit(self.host.clock(), key, reason=reason, actor=actor, cut=cut, summary="", archived=len(removed))
        truncated = i18n.Text("compaction.truncated", {"head": len(cut.head), "tail": len(cut.tail)})
        return CompactionResult("done", truncated, cut.index, len(cut.tail), len(cut.head), 0)
