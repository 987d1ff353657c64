"""Compaction budgets on top of `thresholds` (the trigger numbers the context meter shows, kept in one place)."""

from __future__ import annotations

from agenthub.agent.definition import AgentDefinition
from agenthub.config import Settings
from agenthub.memory import thresholds

TAIL_SHARE = 0.5  # the kept messages may use at most this share of the threshold
OVERFLOW_TAIL_SHARE = 0.25  # after an overflow, keep at most this share of the window
SUMMARY_SHARE = 0.15  # the summary's max_tokens as a share of the threshold
SUMMARY_MAX_TOKENS = 4096
SUMMARY_MIN_TOKENS = 256
CALIBRATION_BOUNDS = (0.5, 4.0)


def window_of(settings: Settings, agent: AgentDefinition, model: str) -> int | None:
    """The model's context window, as the context meter reports it (`thresholds.window_of`)."""
    return thresholds.window_of(settings, agent, model)


def consolidate_at(settings: Settings, agent: AgentDefinition, model: str) -> int:
    """L2's trigger, the same number the context meter shows (`thresholds.consolidate_at_tokens`)."""
    return thresholds.consolidate_at_tokens(settings, agent, model)


def keep_recent(settings: Settings, agent: AgentDefinition) -> int:
    return thresholds.keep_recent(settings, agent)


def autocompact_summary(settings: Settings, agent: AgentDefinition) -> bool:
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
