"""Recall without being asked (`memory.recall = "auto"`): before a turn, the user's words are searched within the
chat's memory scope, and the best passages of other turns go with the newest user message as reference material.

The passages ride in one text block after the message's cache breakpoint, in the request only: the cached prefix
(system, tools, the conversation up to the user's own words) is byte-identical with and without them, and the
history never stores them as the user's words. A failed or slow search costs the turn its recall, nothing more.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from agenthub.llm.tokens import estimate_text_tokens
from agenthub.llm.types import LLMRequest
from agenthub.search.extract import message_text
from agenthub.search.tool import scope_for
from agenthub.session_keys import SessionKey
from agenthub.storage.search_index import ARCHIVE, HISTORY, MEMORY, SearchHit, SearchScope
from agenthub.storage.storable import storable

if TYPE_CHECKING:
    from agenthub.agent.definition import AgentDefinition
    from agenthub.agent.tools import ToolContext
    from agenthub.config import Settings

log = structlog.get_logger(__name__)

Message = dict[str, Any]
Search = Callable[[str, SearchScope, int], Awaitable[list[SearchHit]]]
"""(query, scope, limit) → the hits, best first."""

HEADER = "[相关记忆 / recalled memory]"
INTRO = (
    "Passages from earlier conversations that may bear on the message above, found by a search (reference "
    "material, not the user's words; they may be outdated):"
)
ASKED_HITS = 12
"""Hits asked of the search: more than fit, since those already in the working context are left out."""
MAX_PASSAGES = 5
MAX_QUERY_CHARS = 1000
MIN_PASSAGE_TOKENS = 20
"""A passage is not cut below this: a shorter piece says nothing; it is left out instead."""


@dataclass(frozen=True)
class RecallSettings:
    """The agent's recall setting: agent.json `memory.*`, else `[memory]`."""

    auto: bool
    tokens: int
    timeout_s: float


def recall_settings(settings: Settings, agent: AgentDefinition) -> RecallSettings:
    own = agent.config.memory
    mode = own.recall or settings.memory.recall
    tokens = own.recall_tokens or settings.memory.recall_tokens
    return RecallSettings(mode == "auto", tokens, settings.memory.recall_timeout_s)


def query_of(history: list[Message]) -> str:
    """The text of the turn's user messages (the newest one and those sent together with it); empty when the
    history does not end with words of the user (a tool round trip, a reminder's turn without text)."""
    texts: list[str] = []
    for message in reversed(history):
        content = message.get("content")
        if message.get("role") != "user" or (isinstance(content, list) and any(_is_result(b) for b in content)):
            break
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(str(b.get("text") or "") for b in content if isinstance(b, dict) and b.get("type") == "text")
        if not message.get("together"):  # the turn's first message
            break
    return " ".join(" ".join(reversed(texts)).split())[:MAX_QUERY_CHARS]


def _is_result(block: object) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_result"


class Recall:
    """Finds and formats one turn's recalled passages."""

    def __init__(self, search: Search, recall: RecallSettings, zone: dt.tzinfo = dt.UTC) -> None:
        self.search = search
        self.recall = recall
        self.zone = zone
        """`scheduler.timezone`: the clock the passages' times are told on."""

    async def block(self, key: SessionKey, scope: SearchScope, history: list[Message]) -> dict[str, Any] | None:
        """The text block of recalled passages for the turn `history` ends with; None when nothing is recalled."""
        query = query_of(history)
        if not query:
            return None
        try:
            async with asyncio.timeout(self.recall.timeout_s):
                hits = await self.search(query, scope, ASKED_HITS)
        except TimeoutError:
            log.warning("recall_skipped", reason="slow", timeout_s=self.recall.timeout_s)
            return None
        except Exception as e:  # never the turn's failure: it goes on without recall
            log.warning("recall_skipped", reason="failed", error_type=type(e).__name__)
            return None
        context = _context_texts(history)
        fresh = [hit for hit in hits if not _in_context(hit, key, context)]
        text = render(fresh, self.recall.tokens, self.zone)
        return {"type": "text", "text": text} if text else None


async def with_recall(request: LLMRequest, history: list[Message], ctx: ToolContext, settings: Settings) -> LLMRequest:
    """`request` with the turn's recalled passages after its newest message's blocks, when the agent recalls
    automatically and something was found; else `request` itself."""
    recall = recall_settings(settings, ctx.agent)
    search = ctx.search
    if not recall.auto or search is None or not request.messages or request.messages[-1].get("role") != "user":
        return request

    scope, _labels, files = scope_for(ctx)

    async def find(query: str, scope: SearchScope, limit: int) -> list[SearchHit]:
        return await search.search(ctx.agent.name, query, scope, limit, memory_files=files, zone=ctx.zone)

    block = await Recall(find, recall, ctx.zone).block(ctx.key, scope, history)
    if block is None:
        return request
    newest = request.messages[-1]
    content = newest["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    return dataclasses.replace(
        request, messages=[*request.messages[:-1], {**newest, "content": [*blocks, block]}], first_call_tail=1
    )


def _context_texts(history: list[Message]) -> set[str]:
    """The searchable text of every message in the working context, whitespace-normalised and `storable` as the
    index keeps it (a NUL as U+FFFD), so a passage holding the same words is known for them."""
    texts: set[str] = set()
    names: dict[str, str] = {}
    for message in history:
        text = storable(message_text(message, names, lambda _id: False))
        if text:
            texts.add(" ".join(text.split()))
    return texts


def _in_context(hit: SearchHit, key: SessionKey, context: set[str]) -> bool:
    """Whether the request carries `hit` already: a message of this chat's loaded history (or a summary folded into
    the system prompt), a memory file (in the system prompt), or the same words anywhere in the context."""
    passage = hit.passage
    if passage.kind == MEMORY or (passage.kind == HISTORY and passage.session == str(key)):
        return True
    return " ".join(passage.text.split()) in context


def render(hits: list[SearchHit], budget: int, zone: dt.tzinfo = dt.UTC) -> str:
    """The recalled passages, best first, each labelled with its chat, speaker and time (on the clock of `zone`),
    within `budget` tokens (the last one that fits cut); empty when none fits."""
    lines = [HEADER, INTRO]
    used = sum(estimate_text_tokens(line) + 1 for line in lines)
    passages = 0
    for hit in hits:
        if passages == MAX_PASSAGES:
            break
        passage = hit.passage
        speaker = f"{passage.role} {passage.speaker}" if passage.speaker else passage.role
        label = f"- ({_where(hit)}, {speaker}, {_when(passage.ts, zone)}) "
        room = budget - used - estimate_text_tokens(label) - 1
        if room < MIN_PASSAGE_TOKENS:
            break
        text = _cut(" ".join(passage.text.split()), room)
        lines.append(label + text)
        used += estimate_text_tokens(lines[-1]) + 1
        passages += 1
    return "\n".join(lines) if passages else ""


def _cut(text: str, budget: int) -> str:
    """`text` within about `budget` tokens, cut at the end with "…"."""
    if estimate_text_tokens(text) <= budget:
        return text
    text = text[: budget * 4]  # a token is at least one character and at most four: nothing longer fits
    low, high = 0, len(text)
    while low < high:  # the longest start that fits
        middle = (low + high + 1) // 2
        if estimate_text_tokens(text[:middle] + "…") <= budget:
            low = middle
        else:
            high = middle - 1
    return text[:low] + "…"


def _where(hit: SearchHit) -> str:
    key = SessionKey.parse(hit.passage.session)
    where = f"chat {key.channel}:{key.chat_id}"
    return where + ", archived" if hit.passage.kind == ARCHIVE else where


def _when(ts: int | None, zone: dt.tzinfo) -> str:
    if ts is None:
        return "time unknown"
    return dt.datetime.fromtimestamp(ts / 1000, tz=zone).strftime("%Y-%m-%d %H:%M %Z").strip()
