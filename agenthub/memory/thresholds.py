"""The memory layer's numbers per agent, in one place: when to compact (explicit overrides, else a share of the
model's context window, else a default), how much a compaction keeps, the summary's size, and what the context
meter shows."""

from __future__ import annotations

from typing import Any

from agenthub.agent.definition import AgentDefinition
from agenthub.config import Settings
from agenthub.llm.models import context_window

DEFAULT_COMPACT_AT = 80_000
TAIL_SHARE = 0.5  # the kept messages may use at most this share of the threshold
OVERFLOW_TAIL_SHARE = 0.25  # after an overflow, keep at most this share of the window
SUMMARY_SHARE = 0.15  # the summary's max_tokens as a share of the threshold
SUMMARY_MAX_TOKENS = 4096
SUMMARY_MIN_TOKENS = 256
CALIBRATION_BOUNDS = (0.5, 4.0)


def agent_model(settings: Settings, agent: AgentDefinition) -> str:
    return agent.config.model or settings.llm.model


def window_of(settings: Settings, agent: AgentDefinition, model: str | None = None) -> int | None:
    """The context window of the agent's model: agent.json, else the known-models table, else `llm.context_window`."""
    if agent.config.memory.context_window is not None:
        return agent.config.memory.context_window
    return context_window(model or agent_model(settings, agent), settings.llm.context_window)


def compact_at_tokens(settings: Settings, agent: AgentDefinition, model: str | None = None) -> int:
    """L2's trigger (the `consolidate_at_tokens` setting): agent.json, else `[memory]`, else a share of the known
    window, else 80000. The context meter shows the same number."""
    override = agent.config.memory.consolidate_at_tokens or settings.memory.consolidate_at_tokens
    if override is not None:
        return override
    window = window_of(settings, agent, model)
    if window is None:
        return DEFAULT_COMPACT_AT
    return int(window * settings.memory.consolidate_window_ratio)


def keep_recent(settings: Settings, agent: AgentDefinition) -> int:
    return agent.config.memory.keep_recent or settings.memory.keep_recent


def autocompact_summary(settings: Settings, agent: AgentDefinition) -> bool:
    """Whether AutoCompact summarises what it sets aside (else it truncates)."""
    override = agent.config.memory.autocompact_summary
    return settings.memory.autocompact_summary if override is None else override


def summary_max_tokens(threshold: int) -> int:
    return max(SUMMARY_MIN_TOKENS, min(SUMMARY_MAX_TOKENS, int(threshold * SUMMARY_SHARE)))


def calibration(real_tokens: int, estimated_tokens: int) -> float:
    """Real prompt tokens per estimated token, bounded so one odd report cannot distort the budgets."""
    if real_tokens <= 0 or estimated_tokens <= 0:
        return 1.0
    low, high = CALIBRATION_BOUNDS
    return max(low, min(high, real_tokens / estimated_tokens))


def thresholds_for(settings: Settings, agent: AgentDefinition) -> dict[str, Any]:
    """The numbers the context meter shows."""
    return {
        "consolidate_at_tokens": compact_at_tokens(settings, agent),
        "keep_recent": keep_recent(settings, agent),
        "context_window": window_of(settings, agent),
        "autocompact_min_messages": settings.memory.autocompact_min_messages,
        "autocompact_keep": settings.memory.autocompact_keep,
    }
