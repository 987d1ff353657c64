"""The `memory_search` tool: parse the query, bound it by the memory scope, and list the hits as short text."""

from __future__ import annotations

import datetime as dt
import re
from typing import TYPE_CHECKING, Any

from agenthub.search.index import ARCHIVE, MEMORY, Hit, SearchScope
from agenthub.storage.keys import SessionKey

if TYPE_CHECKING:
    from agenthub.agent.tools import ToolContext

NAME = "memory_search"
DESCRIPTION = (
    "Search your past conversations (including compacted, archived ones) and memory files by keywords. "
    "Every keyword must appear; Chinese and English both work. Each hit names its session and time."
)
INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "keywords separated by spaces, e.g. '暗号 夜莺' or 'invoice May'"},
        "limit": {"type": "integer", "description": "at most this many hits (default 5, up to 20)"},
    },
    "required": ["query"],
}
DEFAULT_LIMIT = 5
MAX_LIMIT = 20
MAX_TERMS = 8
MAX_TERM_CHARS = 100
SNIPPET_BEFORE = 60
SNIPPET_CHARS = 200


class SearchInputError(Exception):
    """The model sent something that is not a search (told back to it as is)."""


def parse_terms(query: Any) -> list[str]:
    """The distinct whitespace-separated keywords of `query`, without surrounding quotes."""
    if not isinstance(query, str) or not query.strip():
        raise SearchInputError("query must be a non-empty string of keywords")
    terms: list[str] = []
    for raw in query.split():
        term = raw.strip("\"'“”‘’「」")[:MAX_TERM_CHARS]
        if term and term.lower() not in (t.lower() for t in terms):
            terms.append(term)
    if not terms:
        raise SearchInputError("query must contain at least one keyword")
    return terms[:MAX_TERMS]


def parse_limit(value: Any) -> int:
    if value is None:
        return DEFAULT_LIMIT
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SearchInputError("limit must be a positive integer")
    return min(value, MAX_LIMIT)


def scope_for(ctx: ToolContext) -> SearchScope:
    """The memory scope of this call: a chat-scoped chat sees only itself (and its memory file), an agent-scoped one
    every agent-scoped chat of the agent but never a chat-scoped one (under `auto` a WeCom/Feishu chat stays hidden
    from the HTTP console); a per-user profile only the current sender's; the memory files are whichever
    `MemoryFiles` names for this call (indexed only where the store keeps them as files: `MemoryFiles.file_of`)."""
    memory, agent = ctx.memory, ctx.agent
    memory_name = memory.memory_name(agent, ctx.key)
    chat_scoped = memory_name != memory.memory_name(agent)  # not the agent-wide file
    named = [(memory_name, "chat memory" if chat_scoped else "agent memory")]
    profile = memory.profile_name(agent, ctx.key, ctx.sender_id, ctx.chat_type)
    if profile is not None:  # the current sender's own profile of this chat's visibility, or the shared one
        named.append((profile, "user profile"))
    files = tuple((path, label) for name, label in named if (path := memory.file_of(name)) is not None)
    if chat_scoped:
        return SearchScope(session=str(ctx.key), memory_files=files)
    return SearchScope(None, files, agent_scoped=lambda channel: memory.scope_for(agent, channel).memory == "agent")


async def run_memory_search(args: dict[str, Any], ctx: ToolContext) -> str:
    terms, limit = parse_terms(args.get("query")), parse_limit(args.get("limit"))
    if ctx.search is None:
        raise SearchInputError("memory search is not available here")
    hits = await ctx.search.search(ctx.agent.name, terms, scope_for(ctx), limit)
    return format_hits(terms, hits)


def format_hits(terms: list[str], hits: list[Hit]) -> str:
    query = " ".join(terms)
    if not hits:
        return f'no matches for "{query}"'
    lines = [f'{len(hits)} match{"es" if len(hits) > 1 else ""} for "{query}":']
    pattern = re.compile("|".join(re.escape(t) for t in terms), re.IGNORECASE)
    for number, hit in enumerate(hits, start=1):
        lines.append(f"{number}. [{_where(hit)}] {hit.role} {_iso(hit.ts)}: {snippet(hit.text, pattern)}")
    return "\n".join(lines)


def _where(hit: Hit) -> str:
    if hit.kind == MEMORY:
        return hit.label
    key = SessionKey.parse(hit.session)
    where = f"session {key.channel}:{key.chat_id}"
    return where + ", archived" if hit.kind == ARCHIVE else where


def _iso(ts: int | None) -> str:
    if ts is None:
        return "(time unknown)"
    return dt.datetime.fromtimestamp(ts / 1000, tz=dt.UTC).astimezone().isoformat(timespec="seconds")


def snippet(text: str, pattern: re.Pattern[str]) -> str:
    """About 200 characters around the first keyword, on one line."""
    found = pattern.search(text)
    start = max(0, (found.start() if found else 0) - SNIPPET_BEFORE)
    piece = " ".join(text[start : start + SNIPPET_CHARS].split())
    return ("…" if start > 0 else "") + piece + ("…" if start + SNIPPET_CHARS < len(text) else "")
