"""Tools the model can call: the platform memory tools (always on) and whitelisted built-ins."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from agenthub.agent.definition import AgentDefinition
from agenthub.agent.memory_access import MemoryAccess
from agenthub.media.names import another_chats_folder, chat_dir_name
from agenthub.session_keys import SessionKey

if TYPE_CHECKING:
    from agenthub.search.api import Searcher

log = structlog.get_logger(__name__)

MAX_FILE_BYTES = 200_000
"""read_file without offset/limit refuses larger files; paged reads have no size limit."""
DEFAULT_PAGE_CHARS = 20_000
MAX_PAGE_CHARS = 100_000
_SKIP_CHUNK_CHARS = 1 << 20


class ToolError(Exception):
    """A tool failed in a way the model should hear about (sent back as an error tool_result)."""


@dataclass(frozen=True)
class ToolContext:
    """What a tool call may touch: its agent, session, sender, memory files and workspace."""

    agent: AgentDefinition
    key: SessionKey
    sender_id: str
    memory: MemoryAccess
    workspace: Path
    memory_max_chars: int = 8000
    cred_id: str | None = None
    search: Searcher | None = None
    """Memory search, for the turn's automatic recall (`agent/recall.py`)."""
    chat_type: str | None = None
    """`private` / `group` as the channel said (None: unknown, read as a group): which of the sender's profiles."""
    zone: dt.tzinfo = dt.UTC
    """`scheduler.timezone` (the gateway passes it): the clock times are told on and a question's days read on."""


ToolFn = Callable[[dict[str, Any], ToolContext], Awaitable[str]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    run: ToolFn

    def definition(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


def _str_arg(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str):
        raise ToolError(f"argument '{name}' must be a string")
    return value


async def _read_memory(args: dict[str, Any], ctx: ToolContext) -> str:
    text = await ctx.memory.read(ctx.memory.memory_name(ctx.agent, ctx.key))
    return text or "(memory is empty)"


async def _write_memory(args: dict[str, Any], ctx: ToolContext) -> str:
    content = _str_arg(args, "content")
    mode = args.get("mode", "append")
    if mode not in ("append", "replace"):
        raise ToolError("mode must be 'append' or 'replace'")

    def change(old: str) -> str:
        new = content if mode == "replace" else (old.rstrip("\n") + "\n" + content if old.strip() else content)
        if len(new) > ctx.memory_max_chars:
            raise ToolError(
                f"memory would be {len(new)} characters, over the {ctx.memory_max_chars} limit; "
                "rewrite it shorter with mode='replace'"
            )
        return new.rstrip("\n") + "\n"

    saved = await ctx.memory.writer.update(ctx.memory.memory_name(ctx.agent, ctx.key), change)
    return f"memory saved ({len(saved) - 1} characters)"


async def _get_time(args: dict[str, Any], ctx: ToolContext) -> str:
    return dt.datetime.now(ctx.zone).isoformat(timespec="seconds")


def _allowed_roots(ctx: ToolContext) -> list[Path]:
    return [ctx.workspace.resolve(), *(Path(p).expanduser().resolve() for p in ctx.agent.config.system_allowed_paths)]


def _resolve_allowed(raw: str, ctx: ToolContext) -> Path:
    candidate = Path(raw).expanduser()
    path = (candidate if candidate.is_absolute() else ctx.workspace / candidate).resolve()
    if not any(path == root or path.is_relative_to(root) for root in _allowed_roots(ctx)):
        raise ToolError(f"{raw} is outside this agent's workspace and system_allowed_paths")
    folder = another_chats_folder(path, ctx.workspace, ctx.key)
    if folder is not None:
        raise ToolError(f"{raw} is another chat's {folder}; this chat's files are in {folder}/{chat_dir_name(ctx.key)}")
    return path


def _read_small(path: Path) -> str:
    if not path.is_file():
        raise ToolError(f"{path.name} is not a file")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ToolError(f"{path.name} is larger than {MAX_FILE_BYTES} bytes; read it in pages with offset and limit")
    return path.read_text(encoding="utf-8", errors="replace")


def _read_page(path: Path, offset: int, limit: int) -> str:
    """Characters `offset` .. `offset + limit` of a text file of any size (skipped in chunks, never loaded whole),
    with a closing line saying where the next page starts when there is more."""
    if not path.is_file():
        raise ToolError(f"{path.name} is not a file")
    with path.open(encoding="utf-8", errors="replace") as f:
        skipped = 0
        while skipped < offset and (chunk := f.read(min(_SKIP_CHUNK_CHARS, offset - skipped))):
            skipped += len(chunk)
        page = f.read(limit + 1)
    if skipped < offset or not page:
        return f"(nothing at offset {offset}: the file has {skipped} characters)"
    if len(page) <= limit:
        return page
    return f"{page[:limit]}\n[read_file: more follows; the next page starts at offset {offset + limit}]"


def _int_arg(args: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = args.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ToolError(f"argument '{name}' must be a whole number from {low} to {high}")
    return value


async def _read_file(args: dict[str, Any], ctx: ToolContext) -> str:
    path = _resolve_allowed(_str_arg(args, "path"), ctx)
    if args.get("offset") is None and args.get("limit") is None:
        return await asyncio.to_thread(_read_small, path)
    offset = _int_arg(args, "offset", 0, 0, 2**62)
    limit = _int_arg(args, "limit", DEFAULT_PAGE_CHARS, 1, MAX_PAGE_CHARS)
    return await asyncio.to_thread(_read_page, path, offset, limit)


def _listing(path: Path) -> str:
    if not path.is_dir():
        raise ToolError(f"{path.name} is not a directory")
    entries = sorted(path.iterdir())[:500]
    return "\n".join(p.name + ("/" if p.is_dir() else "") for p in entries) or "(empty)"


async def _list_dir(args: dict[str, Any], ctx: ToolContext) -> str:
    return await asyncio.to_thread(_listing, _resolve_allowed(str(args.get("path") or "."), ctx))


def _schema(**props: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": "string", "description": desc} for name, desc in props.items()},
        "required": [name for name in props if name != "mode"],
    }


READ_FILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "file path"},
        "offset": {"type": "integer", "minimum": 0, "description": "first character to read (default 0)"},
        "limit": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_PAGE_CHARS,
            "description": f"characters to read (default {DEFAULT_PAGE_CHARS})",
        },
    },
    "required": ["path"],
}

PLATFORM_TOOLS = (
    Tool(
        "read_memory",
        "Read your long-term memory file (MEMORY.md).",
        {"type": "object", "properties": {}},
        _read_memory,
    ),
    Tool(
        "write_memory",
        "Save durable facts to your long-term memory. mode='append' (default) adds; mode='replace' rewrites it whole.",
        _schema(content="Markdown text to save", mode="'append' or 'replace'"),
        _write_memory,
    ),
)
"""The memory tools every agent has; the features' platform tools (`manage_cron_jobs`, `memory_search`) are added
to a `ToolRegistry` by the composition root."""

BUILTIN_TOOLS = {
    tool.name: tool
    for tool in (
        Tool("get_time", "The current local date and time.", {"type": "object", "properties": {}}, _get_time),
        Tool(
            "read_file",
            "Read a text file from your workspace. Give offset and/or limit (in characters) to read it in pages; "
            "large files must be read that way.",
            READ_FILE_SCHEMA,
            _read_file,
        ),
        Tool("list_dir", "List a directory in your workspace.", _schema(path="directory path"), _list_dir),
    )
}


class ToolRegistry:
    """The platform tools every agent gets: the memory tools, then what the features added at composition time
    (`add`), in that order (it is part of the prompt cache key)."""

    def __init__(self, tools: tuple[Tool, ...] = PLATFORM_TOOLS) -> None:
        self._tools = list(tools)

    def add(self, tool: Tool) -> None:
        if any(t.name == tool.name for t in self._tools):
            raise ValueError(f"a platform tool named {tool.name!r} is already registered")
        self._tools.append(tool)

    @property
    def platform(self) -> tuple[Tool, ...]:
        return tuple(self._tools)

    def for_agent(self, agent: AgentDefinition) -> list[Tool]:
        """The platform tools plus the agent's whitelisted built-ins, in a stable order."""
        return tools_for(agent, self.platform)


def tools_for(agent: AgentDefinition, platform: tuple[Tool, ...] = PLATFORM_TOOLS) -> list[Tool]:
    """`platform` plus the agent's whitelisted built-ins, in a stable order (it is part of the cache key)."""
    tools = list(platform)
    for name in agent.config.tools:
        tool = BUILTIN_TOOLS.get(name)
        if tool is None:
            if name not in {t.name for t in platform} and "__" not in name:  # `server__tool`: MCP's
                log.warning("agent_tool_unknown", agent=agent.name, tool=name)
            continue
        tools.append(tool)
    return tools


async def run_tool(tools: list[Tool], name: str, args: dict[str, Any], ctx: ToolContext) -> tuple[str, bool]:
    """Run one call; returns (result text, is_error). Errors go back to the model, never up the stack."""
    tool = next((t for t in tools if t.name == name), None)
    if tool is None:
        return f"unknown tool: {name}", True
    try:
        return await tool.run(args, ctx), False
    except ToolError as e:
        return str(e), True
    except (OSError, ValueError) as e:
        log.warning("tool_failed", tool=name, error=type(e).__name__)
        return f"{name} failed: {type(e).__name__}", True
    except Exception as e:  # a bug in a tool still goes back to the model, never ends the turn
        log.exception("tool_crashed", tool=name)
        return f"{name} failed unexpectedly ({type(e).__name__})", True
