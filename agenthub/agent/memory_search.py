"""The `memory_search` platform tool: search's `run_memory_search` as a `Tool`, added by the composition root."""

from __future__ import annotations

from typing import Any

from agenthub.agent.tools import Tool, ToolContext, ToolError
from agenthub.errors import StorageError
from agenthub.search import tool as search_tool
from agenthub.search.api import UNAVAILABLE


async def _memory_search(args: dict[str, Any], ctx: ToolContext) -> str:
    try:
        return await search_tool.run_memory_search(args, ctx)
    except search_tool.SearchInputError as e:
        raise ToolError(str(e)) from e
    except StorageError:  # the database is away: the model is told, the turn goes on
        raise ToolError(UNAVAILABLE) from None


def memory_search_tool() -> Tool:
    """The tool over the turn's `ToolContext.search` (the gateway's search service)."""
    return Tool(search_tool.NAME, search_tool.DESCRIPTION, search_tool.INPUT_SCHEMA, _memory_search)
