"""Agent definitions: `agents/<name>/agent.json` + `AGENTS.md`, loaded so one broken agent never hides the rest."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agenthub.config import LONGEST_INTERVAL_S, describe_validation_error
from agenthub.errors import AgentNotFoundError, InvalidIdError
from agenthub.session_keys import validate_agent_name

log = structlog.get_logger(__name__)

DEFAULT_PERSONA = "You are a helpful assistant. Answer in the language the user writes in."
MCP_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]+")


class MemoryOverrides(BaseModel):
    """Per-agent overrides of `[memory]` settings; unset fields follow the global configuration."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    consolidate_at_tokens: int | None = Field(None, ge=1000)
    keep_recent: int | None = Field(None, ge=2)
    context_window: int | None = Field(None, ge=1000)
    autocompact_summary: bool | None = None
    recall: Literal["auto", "off"] | None = None
    """`auto`: recall without being asked (see `[memory] recall`)."""
    recall_tokens: int | None = Field(None, ge=50)
    scope: Literal["auto", "agent", "chat"] = "auto"
    """`auto`: the chat's own memory on multi-user channels (WeCom, Feishu), the agent's elsewhere."""
    user_profile: Literal["auto", "shared", "per_user"] = "auto"
    """`auto`: per sender on multi-user channels, shared elsewhere. Per sender on a multi-user channel means one
    profile per (person, visibility): their private chats' and their groups' (see `memory.files`)."""


class BudgetOverrides(BaseModel):
    """Per-agent overrides of `[budgets]` (tokens; 0: no limit); unset fields follow the global configuration."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    user_day: int | None = Field(None, ge=0)
    user_month: int | None = Field(None, ge=0)
    chat_day: int | None = Field(None, ge=0)
    chat_month: int | None = Field(None, ge=0)
    agent_day: int | None = Field(None, ge=0)
    agent_month: int | None = Field(None, ge=0)
    warn_at: float | None = Field(None, gt=0, le=1)


class McpServerConfig(BaseModel):
    """One MCP tool server of an agent: a command started over stdio, or a streamable HTTP `url`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str | None = Field(None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict, description="added to the safe default environment")
    url: str | None = Field(None, pattern=r"^https?://")

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of 'command' and 'url'")
        if self.url is not None and (self.args or self.env):
            raise ValueError("'args' and 'env' go with 'command', not 'url'")
        return self


class AgentConfig(BaseModel):
    """The schema of `agent.json`."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    description: str = ""
    model: str | None = None
    provider: str = "default"
    max_tokens: int | None = Field(None, ge=1)
    tools: list[str] = Field(default_factory=list)
    lock_timeout_s: float | None = Field(None, gt=0, le=LONGEST_INTERVAL_S)
    memory: MemoryOverrides = Field(default_factory=MemoryOverrides)
    budgets: BudgetOverrides = Field(default_factory=BudgetOverrides)
    system_allowed_paths: list[str] = Field(default_factory=list)
    locale: Literal["zh-CN", "en"] | None = None
    """The language of the texts the product writes in this agent's chats; unset: the channel's locale."""
    mcp: dict[str, McpServerConfig] = Field(default_factory=dict)
    mcp_call_timeout_s: float = Field(60.0, gt=0, description="bound of one MCP tool call")
    mcp_start_wait_s: float = Field(5.0, ge=0, description="how long a turn waits for a server's first start")

    @field_validator("mcp")
    @classmethod
    def _mcp_names(cls, servers: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        for name in servers:
            if not MCP_SERVER_NAME.fullmatch(name):
                raise ValueError(f"MCP server name {name!r} may hold only letters, digits, '_' and '-'")
        return servers


@dataclass(frozen=True)
class AgentDefinition:
    """A loaded agent: its name, its validated config and its persona text."""

    name: str
    config: AgentConfig
    persona: str
    directory: Path | None = None


@dataclass
class AgentRegistry:
    """The loaded agents plus, by name, why each broken one failed to load."""

    agents: dict[str, AgentDefinition] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> AgentDefinition:
        try:
            return self.agents[name]
        except KeyError:
            raise AgentNotFoundError(f"unknown agent: {name}") from None

    def __contains__(self, name: object) -> bool:
        return name in self.agents

    def names(self) -> list[str]:
        return sorted(self.agents)


def load_agent(directory: Path) -> AgentDefinition:
    """Load one agent directory; raise ValueError with a readable reason when it is broken."""
    name = validate_agent_name(directory.name)
    config_path = directory / "agent.json"
    try:
        raw = json.loads(config_path.read_text(encoding="utf-8")) if config_path.exists() else {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"agent.json is not valid JSON: {e}") from None
    if not isinstance(raw, dict):
        raise ValueError("agent.json must hold a JSON object")
    try:
        config = AgentConfig.model_validate(raw)
    except ValidationError as e:
        raise ValueError(describe_validation_error(e).replace("invalid configuration", "invalid agent.json")) from None
    persona_path = directory / "AGENTS.md"
    persona = persona_path.read_text(encoding="utf-8").strip() if persona_path.exists() else DEFAULT_PERSONA
    return AgentDefinition(name=name, config=config, persona=persona or DEFAULT_PERSONA, directory=directory)


def load_agents(agents_dir: Path, *, default_agent: str = "default") -> AgentRegistry:
    """Load every `agents/<name>/`; broken ones are logged by name and skipped.

    If the default agent has no directory, a built-in one is provided so a fresh checkout still answers.
    """
    registry = AgentRegistry()
    if agents_dir.is_dir():
        for directory in sorted(p for p in agents_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            try:
                agent = load_agent(directory)
            except (ValueError, InvalidIdError, OSError) as e:
                registry.errors[directory.name] = str(e)
                log.error("agent_broken", agent=directory.name, reason=str(e))
                continue
            registry.agents[agent.name] = agent
    if default_agent not in registry.agents and default_agent not in registry.errors:
        registry.agents[default_agent] = AgentDefinition(default_agent, AgentConfig(), DEFAULT_PERSONA)
    log.info("agents_loaded", agents=registry.names(), broken=sorted(registry.errors))
    return registry
