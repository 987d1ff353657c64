"""Building the core from settings: agents, LLM providers, history, gateway (shared by `serve` and `chat`)."""

from __future__ import annotations

from agenthub.agent.definition import load_agents
from agenthub.clock import Clock, system_clock
from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.gateway.memory_host import attach_memory_layer
from agenthub.llm.registry import ProviderRegistry
from agenthub.scheduler.wiring import attach_scheduler
from agenthub.storage.migrate import migrate_at_start


def build_gateway(settings: Settings, *, clock: Clock = system_clock) -> GatewayCore:
    """A ready-to-enter GatewayCore with the agents and providers the settings describe."""
    migrate_at_start(settings.workspace_dir, settings.agents_dir)
    agents = load_agents(settings.agents_dir, default_agent=settings.default_agent)
    providers = ProviderRegistry.from_settings(settings.llm)
    gateway = GatewayCore(settings, agents=agents, providers=providers, clock=clock)
    attach_memory_layer(gateway)
    attach_scheduler(gateway)
    return gateway
