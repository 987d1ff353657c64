"""Memory thresholds per agent: explicit overrides, else derived from the model's context window, else defaults."""

from __future__ import annotations

from typing import Any

from agenthub.agent.definition import AgentDefinition
from agenthub.config import Settings
from agenthub.llm.models import context_window

DEFAULT_CONSOLIDATE_AT = 80_000


def agent_model(settings: Settings, agent: AgentDefinition) -> str:
    return agent.config.model or settings.llm.model


def window_of(settings: Settings, agent: AgentDefinition, model: str | None = None) -> int | None:
    """The context window of the agent's model: agent.json, else the known-models table, else `llm.context_window`."""
    if agent.config.memory.context_window is not None:
        return agent.config.memory.context_window
    return context_window(model or agent_model(settings, agent), settings.llm.context_window)


def consolidate_at_tokens(settings: Settings, agent: AgentDefinition, model: str | None = None) -> int:
    """L2's trigger: agent.json, else `[memory]`, else a share of the known window, else 80000."""
    override = agent.config.memory.consolidate_at_tokens or settings.memory.consolidate_at_tokens
    if override is not None:
        return override
    window = window_of(settings, agent, model)
    if window is None:
        return DEFAULT_CONSOLIDATE_AT
    return int(window * settings.memory.consolidate_window_ratio)


def keep_recent(settings: Settings, agent: AgentDefinition) -> int:
    return agent.config.memory.keep_recent or settings.memory.keep_recent


def thresholds_for(settings: Settings, agent: AgentDefinition) -> dict[str, Any]:
    """The numbers the context meter shows."""
    return {
        "consolidate_at_tokens": consolidate_at_tokens(settings, agent),
        "keep_recent": keep_recent(settings, agent),
        "context_window": window_of(settings, agent),
        "autocompact_min_messages": settings.memory.autocompact_min_messages,
        "autocompact_keep": settings.memory.autocompact_keep,
    }
