"""MCP tool servers: one supervised client session per declared server, its tools offered as `server__tool`.

Each server of an agent's `agent.json` `"mcp"` runs in its own long-lived task, which owns the SDK's transport
(`stdio_client` or `streamable_http_client`) and `ClientSession` context managers, so their anyio task groups are
entered and exited in one task. Turns talk to the running `ClientSession` directly. A server that fails to start
or dies is logged by name and restarted with backoff; meanwhile its tools answer with a clear error and the agent
goes on without them. The tool list is fetched when a server starts and kept, so requests stay byte-stable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import anyio
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError
from mcp.shared.message import SessionMessage

from agenthub.agent.definition import AgentDefinition, McpServerConfig
from agenthub.agent.tools import Tool, ToolContext, ToolError, ToolFn

log = structlog.get_logger(__name__)

TOOL_NAME_MAX = 64
"""Longest tool name offered to the model (the Messages API limit)."""
MAX_LIST_PAGES = 100
START_TIMEOUT_MIN_S = 30.0
"""A start (spawn, initialize, list tools) gets `mcp_call_timeout_s`, but at least this long."""
CLOSE_GRACE_S = 5.0
"""How long closing waits for a server's task to shut its transport down before cancelling it."""
ERROR_TEXT_MAX = 300
ReadStream = MemoryObjectReceiveStream[SessionMessage | Exception]
WriteStream = MemoryObjectSendStream[SessionMessage]


@dataclass(frozen=True)
class RestartBackoff:
    """Delay before restarting a server after `failures` consecutive failed starts or deaths."""

    first_s: float = 1.0
    max_s: float = 60.0

    def delay_s(self, failures: int) -> float:
        return float(min(self.max_s, self.first_s * 2 ** max(0, failures - 1)))


class ServerState(StrEnum):
    STARTING = "starting"  # the first start attempt has not finished yet
    RUNNING = "running"  # initialised, tools listed, calls go through
    DOWN = "down"  # failed to start or died; a restart is scheduled
    CLOSED = "closed"  # the gateway is shutting down (or the agent no longer declares it)


def exposed_name(server: str, tool: str) -> str:
    """`server__tool`, with characters the Messages API does not accept in tool names turned into `_`."""
    return f"{server}__{re.sub(r'[^A-Za-z0-9_-]', '_', tool)}"


def whitelisted(whitelist: Iterable[str], name: str) -> bool:
    """An MCP tool is offered when the agent's `tools` names it exactly or as `server__*`."""
    return any(entry == name or (entry.endswith("__*") and name.startswith(entry[:-1])) for entry in whitelist)


def render_result(result: types.CallToolResult) -> str:
    """The text the model gets for a tool result: its text blocks; other kinds are named, not shown."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.EmbeddedResource) and isinstance(block.resource, types.TextResourceContents):
            parts.append(block.resource.text)
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource: {block.uri}]")
        else:
            parts.append(f"[{block.type} content not shown]")
    if not parts and result.structuredContent is not None:
        parts.append(json.dumps(result.structuredContent, ensure_ascii=False, sort_keys=True))
    return "\n".join(parts)


async def _list_all_tools(session: ClientSession) -> list[types.Tool]:
    listed: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        listed += page.tools
        cursor = page.nextCursor
        if not cursor:
            break
    return listed


class McpServer:
    """One declared server of one agent, supervised by its own task (see the module docstring).

    `tools` is the cached listing (empty until the first successful start, then kept across restarts unless the
    server lists different tools). `call` never raises anything but `ToolError` for the server's own failures.
    """

    def __init__(
        self, agent: str, name: str, config: McpServerConfig, *, timeout_s: float, backoff: RestartBackoff
    ) -> None:
        self.agent, self.name, self.config, self.timeout_s = agent, name, config, timeout_s
        self.backoff = backoff
        self.state = ServerState.STARTING
        self.starts = 0
        self.failures = 0
        self.tools: tuple[Tool, ...] = ()
        self._listing: list[dict[str, Any]] = []
        self._session: ClientSession | None = None
        self._broken = asyncio.Event()
        self._closing = asyncio.Event()
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._supervise(), name=f"mcp:{self.agent}:{self.name}")

    async def wait_until(self, predicate: Callable[[McpServer], bool]) -> None:
        """Wait until `predicate(self)` holds (checked after every state change)."""
        async with self._changed:
            await self._changed.wait_for(lambda: predicate(self))

    async def wait_first_attempt(self) -> None:
        await self.wait_until(lambda s: s.state is not ServerState.STARTING)

    async def aclose(self) -> None:
        """Shut the session and transport down (the task does it); cancel the task if it does not end soon."""
        self._closing.set()
        task = self._task
        if task is None:
            return
        _, pending = await asyncio.wait([task], timeout=CLOSE_GRACE_S)
        if pending:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self._set_state(ServerState.CLOSED)

    # ---- calls ---------------------------------------------------------------------------------

    async def call(self, tool: str, args: dict[str, Any]) -> str:
        session = self._session
        if session is None:
            raise ToolError(f"MCP server '{self.name}' is not available right now (it is being restarted)")
        try:
            async with asyncio.timeout(self.timeout_s):
                result = await session.call_tool(tool, args)
        except TimeoutError:
            raise ToolError(f"MCP tool '{tool}' of '{self.name}' did not answer within {self.timeout_s:g} s") from None
        except McpError as e:
            if e.error.code == types.CONNECTION_CLOSED:
                raise self._lost() from None
            raise ToolError(f"MCP server '{self.name}' refused the call: {e.error.message[:ERROR_TEXT_MAX]}") from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            raise self._lost() from None
        except RuntimeError:  # the SDK's check of structured content against the tool's output schema
            raise ToolError(f"MCP tool '{tool}' of '{self.name}' returned a malformed result") from None
        text = render_result(result)
        if result.isError:
            raise ToolError(text[:ERROR_TEXT_MAX] or f"MCP tool '{tool}' reported an error")
        return text

    def _lost(self) -> ToolError:
        self._broken.set()
        return ToolError(f"MCP server '{self.name}' stopped during the call; it is being restarted")

    def _bind(self, tool: str) -> ToolFn:
        async def run(args: dict[str, Any], ctx: ToolContext) -> str:
            return await self.call(tool, args)

        return run

    # ---- supervision ---------------------------------------------------------------------------

    async def _supervise(self) -> None:
        while not self._closing.is_set():
            try:
                await self._serve_once()
            except Exception as e:  # a server that cannot start must never take the gateway down
                log.warning(
                    "mcp_server_unavailable", agent=self.agent, server=self.name, error=_describe(e), exc_info=True
                )
            self._session = None
            if self._closing.is_set():
                break
            self.failures += 1
            await self._set_state(ServerState.DOWN)
            delay = self.backoff.delay_s(self.failures)
            log.info("mcp_server_restart_scheduled", agent=self.agent, server=self.name, delay_s=delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), delay)

    async def _serve_once(self) -> None:
        self._broken = asyncio.Event()
        async with contextlib.AsyncExitStack() as stack:
            read, write = await self._open_transport(stack)
            session = await stack.enter_async_context(ClientSession(await self._watch(stack, read), write))
            async with asyncio.timeout(max(self.timeout_s, START_TIMEOUT_MIN_S)):
                await session.initialize()
                listed = await _list_all_tools(session)
            self._cache_tools(listed)
            self._session, self.failures = session, 0
            self.starts += 1
            log.info("mcp_server_started", agent=self.agent, server=self.name, tools=len(self.tools))
            await self._set_state(ServerState.RUNNING)
            await _first_of(self._broken, self._closing)
            self._session = None
            if not self._closing.is_set():
                log.warning("mcp_server_died", agent=self.agent, server=self.name)

    async def _open_transport(self, stack: contextlib.AsyncExitStack) -> tuple[ReadStream, WriteStream]:
        config = self.config
        if config.command is not None:
            params = StdioServerParameters(command=config.command, args=config.args, env=dict(config.env))
            read, write = await stack.enter_async_context(stdio_client(params))
            return read, write
        assert config.url is not None
        read, write, _ = await stack.enter_async_context(streamable_http_client(config.url))
        return read, write

    async def _watch(self, stack: contextlib.AsyncExitStack, read: ReadStream) -> ReadStream:
        """Relay the transport's messages to the session; the end of the transport's stream marks the server
        broken (a dead stdio process, a dropped HTTP connection) so it is restarted without waiting for a call."""
        relay_send, relay_read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        group = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(group.cancel_scope.cancel)
        broken = self._broken

        async def relay() -> None:
            try:
                async with relay_send:
                    async for item in read:
                        await relay_send.send(item)
            finally:
                broken.set()

        group.start_soon(relay)
        return relay_read

    def _cache_tools(self, listed: list[types.Tool]) -> None:
        """Keep the previous Tool objects when the server lists the same tools again (byte-stable requests)."""
        listing = [t.model_dump(mode="json", include={"name", "description", "inputSchema"}) for t in listed]
        if self.tools and listing == self._listing:
            return
        if self.tools:
            log.info("mcp_tools_changed", agent=self.agent, server=self.name)
        tools: list[Tool] = []
        for tool in listed:
            name = exposed_name(self.name, tool.name)
            if len(name) > TOOL_NAME_MAX or any(t.name == name for t in tools):
                log.warning("mcp_tool_skipped", agent=self.agent, server=self.name, tool=tool.name[:100])
                continue
            description = tool.description or f"The tool {tool.name} of the MCP server {self.name}."
            tools.append(Tool(name, description, dict(tool.inputSchema), self._bind(tool.name)))
        self.tools, self._listing = tuple(tools), listing

    async def _set_state(self, state: ServerState) -> None:
        async with self._changed:
            self.state = state
            self._changed.notify_all()


async def _first_of(*events: asyncio.Event) -> None:
    waits = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


def _describe(error: BaseException) -> str:
    """The exception's type names (an ExceptionGroup's members too); never its text, which may hold env values."""
    if isinstance(error, BaseExceptionGroup):
        return ",".join(sorted({_describe(e) for e in error.exceptions}))
    return type(error).__name__


class McpHub:
    """The MCP servers of every agent, for the gateway's lifetime.

    `sync` launches the servers the agents' whitelists reach and retires those of agents that are gone;
    `tools_for` does the same for one agent (retiring servers whose declaration changed), waits for each one's
    first start attempt, and returns the whitelisted tools in a stable order (servers by name, tools as listed).
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
        servers = self._ensure(agent)
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
