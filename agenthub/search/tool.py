"""The `memory_search` tool: a question or keywords, bound by the memory scope, answered with ranked passages."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agenthub.search.passages import format_hits
from agenthub.search.text import query_terms
from agenthub.storage.search_index import SearchScope, memory_doc_name

if TYPE_CHECKING:
    from pathlib import Path

    from agenthub.agent.tools import ToolContext

NAME = "memory_search"
DESCRIPTION = (
    "Search everything said in your past conversations (also compacted and archived ones), their summaries, and "
    "your memory files and the user's profile. Pass the user's question itself (e.g. 'What car does Evan drive?', "
    "'我们的暗号是什么') or a few keywords, Chinese, English or mixed; names, numbers, dates and codes match exactly. "
    "Keep the question's time words ('last week', '两周前', 'in March', 'the first time', '最近'): what was said "
    "then comes first. "
    "Hits are ranked by relevance, best first; each shows the matching passage (») with the turn before and after "
    "it, who said it, when and in which chat. Search again with other words if the first hits miss."
)
INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": "the question as asked, or keywords, e.g. 'when is the launch?', '暗号 夜莺', 'invoice May'",
        },
        "limit": {"type": "integer", "description": "at most this many passages (default 5, up to 20)"},
    },
    "required": ["query"],
}
DEFAULT_LIMIT = 5
MAX_LIMIT = 20


class SearchInputError(Exception):
    """The model sent something that is not a search (told back to it as is)."""


def parse_query(query: Any) -> str:
    if not isinstance(query, str) or not query.strip():
        raise SearchInputError("query must be a non-empty string: the question or keywords to search for")
    if not query_terms(query):
        raise SearchInputError("query has no words to search for (only punctuation or symbols)")
    return query


def parse_limit(value: Any) -> int:
    if value is None:
        return DEFAULT_LIMIT
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SearchInputError("limit must be a positive integer")
    return min(value, MAX_LIMIT)


def scope_for(ctx: ToolContext) -> tuple[SearchScope, dict[str, str], dict[str, Path]]:
    """The memory scope of this call, the labels of its memory docs and where they are files: a chat-scoped chat
    sees only itself (and its memory file), an agent-scoped one every agent-scoped chat of the agent but never a
    chat-scoped one (under `auto` a WeCom/Feishu chat stays hidden from the HTTP console); a per-user profile only
    the current sender's; the memory files are whichever `MemoryFiles` names for this call."""
    memory, agent = ctx.memory, ctx.agent
    memory_name = memory.memory_name(agent, ctx.key)
    chat_scoped = memory_name != memory.memory_name(agent)  # not the agent-wide file
    named = [(memory_name, "chat memory" if chat_scoped else "agent memory")]
    profile = memory.profile_name(agent, ctx.key, ctx.sender_id, ctx.chat_type)
    if profile is not None:  # the current sender's own profile of this chat's visibility, or the shared one
        named.append((profile, "user profile"))
    labels = {memory_doc_name(name): label for name, label in named}
    files = {memory_doc_name(name): path for name, _ in named if (path := memory.file_of(name)) is not None}
    names = tuple(labels)
    if chat_scoped:
        return SearchScope(str(ctx.key), names), labels, files
    scope = SearchScope(None, names, agent_scoped=lambda channel: memory.scope_for(agent, channel).memory == "agent")
    return scope, labels, files


async def run_memory_search(args: dict[str, Any], ctx: ToolContext) -> str:
    query, limit = parse_query(args.get("query")), parse_limit(args.get("limit"))
    if ctx.search is None:
        raise SearchInputError("memory search is not available here")
    scope, labels, files = scope_for(ctx)
    hits = await ctx.search.search(ctx.agent.name, query, scope, limit, memory_files=files, zone=ctx.zone)
    return format_hits(query, hits, query_terms(query), labels, ctx.zone)
