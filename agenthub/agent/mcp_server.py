"""One MCP tool server, supervised: its own task owns the SDK transport and `ClientSession`; turns call through it.

The task enters and exits the transport (`stdio_client` or `streamable_http_client`) and `ClientSession` context
managers itself, so their anyio task groups live in one task. A server that fails to start or dies is logged by
name and restarted with backoff; meanwhile its tools answer with a clear error. The tool list is fetched when the
server starts and kept while it lists the same tools, so requests stay byte-stable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
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

from agenthub.agent.definition import McpServerConfig
from agenthub.agent.mcp_support import (
    EventSet,
    RestartBackoff,
    describe_error,
    exposed_name,
    first_of,
    stderr_to_log,
    unless_set,
)
from agenthub.agent.tools import Tool, ToolContext, ToolError, ToolFn

log = structlog.get_logger(__name__)

TOOL_NAME_MAX = 64
"""Longest tool name offered to the model (the Messages API limit)."""
START_TIMEOUT_MIN_S = 30.0
"""A start (spawn, initialize, list tools) gets `mcp_call_timeout_s`, but at least this long."""
CLOSE_GRACE_S = 5.0
"""How long closing waits for a server's task to shut its transport down before cancelling it."""
ERROR_TEXT_MAX = 4000
"""At most this much of a server's error text reaches the model."""
MAX_LIST_PAGES = 100
SESSION_GONE = frozenset({types.CONNECTION_CLOSED, 32600})
"""Error codes that mean the session is lost: the connection closed, or (32600, as the SDK's streamable HTTP
client reports a 404) the server no longer knows the session, e.g. after it restarted. Either way: restart."""
ReadStream = MemoryObjectReceiveStream[SessionMessage | Exception]
WriteStream = MemoryObjectSendStream[SessionMessage]


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


async def list_all_tools(session: ClientSession) -> list[types.Tool]:
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


class ServerState(StrEnum):
    STARTING = "starting"  # the first start attempt has not finished yet
    RUNNING = "running"  # initialised, tools listed, calls go through
    DOWN = "down"  # failed to start or died; a restart is scheduled
    CLOSED = "closed"  # the gateway is shutting down (or the agent no longer declares it)


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
        self._live: tuple[ClientSession, asyncio.Event] | None = None
        """The running session and the event that marks its end (a fresh pair per start)."""
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
        live = self._live
        if live is None:
            raise ToolError(f"MCP server '{self.name}' is not available right now (it is being restarted)")
        session, ended = live
        try:
            async with asyncio.timeout(self.timeout_s):
                result = await unless_set(ended, session.call_tool(tool, args))
        except EventSet:  # the session ended under the call (the SDK does not always fail a pending request then)
            raise self._lost(ended) from None
        except TimeoutError:
            raise ToolError(f"MCP tool '{tool}' of '{self.name}' did not answer within {self.timeout_s:g} s") from None
        except McpError as e:
            if e.error.code in SESSION_GONE:
                raise self._lost(ended) from None
            raise ToolError(f"MCP server '{self.name}' refused the call: {e.error.message[:ERROR_TEXT_MAX]}") from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            raise self._lost(ended) from None
        except RuntimeError:  # the SDK's check of structured content against the tool's output schema
            raise ToolError(f"MCP tool '{tool}' of '{self.name}' returned a malformed result") from None
        text = render_result(result)
        if result.isError:
            raise ToolError(text[:ERROR_TEXT_MAX] or f"MCP tool '{tool}' reported an error")
        return text

    def _lost(self, ended: asyncio.Event) -> ToolError:
        ended.set()  # the supervisor restarts the server
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
                log.warning(  # the traceback once per outage, not on every retry
                    "mcp_server_unavailable",
                    agent=self.agent,
                    server=self.name,
                    error=describe_error(e),
                    exc_info=self.failures == 0,
                )
            if self._closing.is_set():
                break
            self.failures += 1
            await self._set_state(ServerState.DOWN)
            delay = self.backoff.delay_s(self.failures)
            log.info("mcp_server_restart_scheduled", agent=self.agent, server=self.name, delay_s=delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), delay)

    async def _serve_once(self) -> None:
        ended = asyncio.Event()
        try:
            await self._serve(ended)
        finally:
            self._live = None
            ended.set()  # calls still waiting on this session fail now, whatever state the SDK left them in

    async def _serve(self, ended: asyncio.Event) -> None:
        async with contextlib.AsyncExitStack() as stack:
            read, write = await self._open_transport(stack)
            session = await stack.enter_async_context(ClientSession(await self._watch(stack, read, ended), write))
            async with asyncio.timeout(max(self.timeout_s, START_TIMEOUT_MIN_S)):
                await session.initialize()
                listed = await list_all_tools(session)
            self._cache_tools(listed)
            self._live, self.failures = (session, ended), 0
            self.starts += 1
            log.info("mcp_server_started", agent=self.agent, server=self.name, tools=len(self.tools))
            await self._set_state(ServerState.RUNNING)
            await first_of(ended, self._closing)
            self._live = None
            if not self._closing.is_set():
                log.warning("mcp_server_died", agent=self.agent, server=self.name)

    async def _open_transport(self, stack: contextlib.AsyncExitStack) -> tuple[ReadStream, WriteStream]:
        config = self.config
        if config.command is not None:
            params = StdioServerParameters(command=config.command, args=config.args, env=dict(config.env))
            errlog = await stderr_to_log(stack, agent=self.agent, server=self.name)
            try:
                read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
            finally:
                errlog.close()  # the server process holds its own copy of the pipe's write end
            return read, write
        assert config.url is not None
        read, write, _ = await stack.enter_async_context(streamable_http_client(config.url))
        return read, write

    async def _watch(self, stack: contextlib.AsyncExitStack, read: ReadStream, ended: asyncio.Event) -> ReadStream:
        """Relay the transport's messages to the session; the end of the transport's stream marks the server
        broken (a dead stdio process, a dropped HTTP connection) so it is restarted without waiting for a call."""
        relay_send, relay_read = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        group = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(group.cancel_scope.cancel)

        async def relay() -> None:
            try:
                async with relay_send:
                    async for item in read:
                        await relay_send.send(item)
            finally:
                ended.set()

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
