"""MCP tool servers of every agent (`agent.json` `"mcp"`), offered to the model as `server__tool`.

Servers are reached through the official `mcp` SDK over stdio or streamable HTTP; each runs supervised in its own
task (`mcp_server.McpServer`). Only the tools an agent's `tools` whitelist names (exactly or as `server__*`) are
offered, and a server no entry reaches is not started. The SDK is imported only once a server is started.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from agenthub.agent.definition import AgentDefinition
from agenthub.agent.mcp_support import RestartBackoff
from agenthub.agent.tools import Tool

if TYPE_CHECKING:
    from agenthub.agent.mcp_server import McpServer


def whitelisted(whitelist: Iterable[str], name: str) -> bool:
    """An MCP tool is offered when the agent's `tools` names it exactly or as `server__*`."""
    return any(entry == name or (entry.endswith("__*") and name.startswith(entry[:-1])) for entry in whitelist)


class McpHub:
    """The MCP servers of every agent, for the gateway's lifetime.

    `sync` launches the servers the agents' whitelists reach and retires those of agents that are gone;
    `tools_for` does the same for one agent (retiring servers whose declaration changed), waits a few seconds
    for each one's first start attempt, and returns the whitelisted tools in a stable order (servers by name, tools
    as listed).
    """

    def __init__(self, *, backoff: RestartBackoff | None = None) -> None:
        self.backoff = backoff or RestartBackoff()
        self._servers: dict[tuple[str, str], McpServer] = {}
        self._retiring: set[asyncio.Task[None]] = set()
        self._closed = False

    def sync(self, agents: Iterable[AgentDefinition]) -> None:
        """Start what `agents` declare (and their whitelists reach); retire servers no agent declares any more.
        Called at gateway start and after an agent reload."""
        agents = list(agents)
        names = {agent.name for agent in agents}
        for owner, name in [key for key in self._servers if key[0] not in names]:
            self._retire(self._servers.pop((owner, name)))
        for agent in agents:
            self._ensure(agent)

    def server(self, agent: str, name: str) -> McpServer | None:
        return self._servers.get((agent, name))

    async def tools_for(self, agent: AgentDefinition) -> list[Tool]:
        """The agent's tools after waiting at most `mcp_start_wait_s` for the first start of its servers: a server
        still starting then adds its tools to a later turn (the list grows once, then stays byte-stable)."""
        servers = self._ensure(agent)
        if not servers:  # most agents: no server to wait for (no timer, no gather on every turn)
            return self.cached_tools(agent)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(agent.config.mcp_start_wait_s):
                await asyncio.gather(*(s.wait_first_attempt() for s in servers))
        return self.cached_tools(agent)

    def cached_tools(self, agent: AgentDefinition) -> list[Tool]:
        """The agent's whitelisted MCP tools as last listed, without waiting for anything."""
        servers = [self._servers.get((agent.name, name)) for name in sorted(agent.config.mcp)]
        whitelist = agent.config.tools
        return [t for s in servers if s is not None for t in s.tools if whitelisted(whitelist, t.name)]

    async def aclose(self) -> None:
        self._closed = True
        servers = list(self._servers.values())
        self._servers.clear()
        await asyncio.gather(*(s.aclose() for s in servers), *self._retiring)

    def _ensure(self, agent: AgentDefinition) -> list[McpServer]:
        if self._closed:
            return []
        config = agent.config
        wanted = {n: c for n, c in config.mcp.items() if any(e.startswith(f"{n}__") for e in config.tools)}
        for (owner, name), server in list(self._servers.items()):
            declared = wanted.get(name) if owner == agent.name else server.config
            if declared != server.config or (owner == agent.name and server.timeout_s != config.mcp_call_timeout_s):
                self._retire(self._servers.pop((owner, name)))
        servers = []
        for name in sorted(wanted):
            running = self._servers.get((agent.name, name))
            if running is None:
                from agenthub.agent.mcp_server import McpServer  # the SDK loads only when some agent declares a server

                running = McpServer(
                    agent.name, name, wanted[name], timeout_s=config.mcp_call_timeout_s, backoff=self.backoff
                )
                self._servers[(agent.name, name)] = running
                running.start()
            servers.append(running)
        return servers

    def _retire(self, server: McpServer) -> None:
        task = asyncio.create_task(server.aclose())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)
