"""Request assembly next to the agent loop: the cacheable system prompt (persona, summaries, memory files), the
message list and its cache marks."""

from __future__ import annotations

import datetime as dt
import operator
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from agenthub.agent.conversion import (
    CACHE,
    Memo,
    Positions,
    chat_type_of,
    cut_old_tool_results,
    drop_refused_turns,
    fold_system_messages,
    images_to_send,
    mark_newest_message,
    place_images,
    recent_image_refs,
    to_api_messages,
    to_conversation,
)
from agenthub.agent.definition import AgentDefinition
from agenthub.agent.memory_access import MemoryAccess
from agenthub.agent.memory_notes import MemoryNotes
from agenthub.agent.settled import settled_conversation
from agenthub.agent.tools import Tool
from agenthub.llm.cache_watch import MEMORY_HEADER, PROFILE_HEADER
from agenthub.llm.tokens import estimate_text_tokens, estimate_tokens
from agenthub.llm.types import LLMRequest
from agenthub.media.loader import ImageCache
from agenthub.session_keys import SessionKey

Message = dict[str, Any]


def cut_to_tokens(text: str, budget: int) -> str:
    """Keep the start of `text` within about `budget` tokens; cut at a line boundary and say so."""
    if estimate_text_tokens(text) <= budget:
        return text
    lines, kept, used = text.splitlines(), [], 0
    for line in lines:
        cost = estimate_text_tokens(line) + 1
        if used + cost > budget:
            break
        kept.append(line)
        used += cost
    return "\n".join(kept) + "\n…(cut to fit the memory budget)"


@dataclass(frozen=True)
class ContextBudget:
    memory_tokens: int = 2000
    user_tokens: int = 1000
    old_tool_result_chars: int = 4000
    """`memory.old_tool_result_chars`: see `cut_old_tool_results`."""


MEMO_SESSIONS = 128
"""Sessions whose converted messages `ContextBuilder` keeps between turns (the most recently built)."""
STABLE_PARTS = 256
"""Tool lists and system prompts `ContextBuilder` keeps built (the most recently made)."""


class ContextBuilder:
    """Builds each request so that everything before the conversation is byte-stable between turns.

    Order: persona, folded summaries, MEMORY.md, USER.md (the chat's memory and the current sender's profile as
    `memory_scope` resolves them, each cut to its token budget),
    then the tools; the last system block, the last tool and the newest message's last block carry
    `cache_control`. Volatile data (time,
    channel) rides on each user message, derived from what was stored, never in the system prompt. While the
    chat's prompt cache is warm, text appended to MEMORY.md rides as a note on a message instead (`MemoryNotes`).
    """

    def __init__(
        self,
        memory_files: MemoryAccess,
        budget: ContextBudget | None = None,
        *,
        workspace_dir: Path = Path("workspace"),
        images: ImageCache | None = None,
        zone: dt.tzinfo = dt.UTC,
    ) -> None:
        self.memory_files = memory_files
        self.zone = zone
        """`scheduler.timezone`: the clock user messages' times are told on (one zone every build: the cached prefix
        stays the same)."""
        self.budget = budget or ContextBudget()
        self.workspace_dir = workspace_dir
        self.images = images or ImageCache()
        self.text_only_models: set[str] = set()
        """Models that refused a request with images (this process): they get `[image: <path>]` text instead."""
        self._memos: OrderedDict[SessionKey, Memo] = OrderedDict()
        self._stable: OrderedDict[tuple[Any, ...], tuple[tuple[Any, ...], list[dict[str, Any]]]] = OrderedDict()
        """The request parts that change rarely (tool definitions, system blocks), built once per change."""
        self.last_computed = 0
        """Per-message results the last `build` computed (the others came from its session's memo)."""
        self.memory_notes = True
        """Whether additions to MEMORY.md ride as notes while a chat's cache is warm (`memory_notes`)."""
        self.notes = MemoryNotes()
        self.cache_warm: Callable[[str], bool] = lambda chat: True
        """Whether a chat's prompt cache is still alive (the gateway's `CacheWatch.warm`)."""

    def history_changed(self, op: str, key: SessionKey) -> None:
        """A SessionHistory observer: a replace, clear or delete drops the session's memo, so no text the history
        no longer holds is kept here."""
        if op != "append":
            self._memos.pop(key, None)
            self.notes.drop(key)

    def drop_kept(self) -> None:
        """After a forget: the system prompt parts kept from build to build (memory and profile texts, the blocks
        made of them), every chat's pinned memory and the images kept go; the next builds read the files as they
        are now."""
        self._stable.clear()
        self.notes.clear()
        self.images.clear()

    def _memo(self, key: SessionKey) -> Memo:
        """The session's memo, the most recently used sessions' kept (`MEMO_SESSIONS`)."""
        memo = self._memos.pop(key, None) or Memo()
        self._memos[key] = memo
        while len(self._memos) > MEMO_SESSIONS:
            self._memos.popitem(last=False)
        return memo

    def _definitions(self, tools: list[Tool]) -> list[dict[str, Any]]:
        """The tools' definitions, the last one marked for the cache: the same list (not to be changed) while the
        same tools are offered, so what derives from it per call (its encoding, its digest) is derived once."""
        key = tuple(map(id, tools))
        hit = self._stable.get(key)
        if hit is not None and all(map(operator.is_, hit[0], tools)):
            self._stable.move_to_end(key)
            return hit[1]
        definitions = [t.definition() for t in tools]
        if definitions:
            definitions[-1] = {**definitions[-1], "cache_control": CACHE}
        self._keep(key, (tuple(tools), definitions))
        return definitions

    def _system(self, texts: list[str], memory: str, profile: str) -> list[dict[str, Any]]:
        """`_marked_blocks`, the same list (not to be changed) while the texts are the same."""
        key = (tuple(texts), memory, profile)
        hit = self._stable.get(key)
        if hit is not None:
            self._stable.move_to_end(key)
            return hit[1]
        blocks = _marked_blocks(texts, memory, profile)
        self._keep(key, ((), blocks))
        return blocks

    def _keep(self, key: tuple[Any, ...], value: tuple[tuple[Any, ...], list[dict[str, Any]]]) -> None:
        self._stable[key] = value
        while len(self._stable) > STABLE_PARTS:
            self._stable.popitem(last=False)

    def sends_images(self, history: list[Message], model: str) -> bool:
        """True when the next request for `history` carries image blocks to `model`."""
        return model not in self.text_only_models and bool(images_to_send(history))

    async def system_blocks(
        self, agent: AgentDefinition, key: SessionKey, sender_id: str, history: list[Message]
    ) -> list[dict[str, Any]]:
        return _marked_blocks(*await self._system_parts(agent, key, sender_id, history))

    async def _system_parts(
        self,
        agent: AgentDefinition,
        key: SessionKey,
        sender_id: str,
        history: list[Message],
        known: tuple[list[str], object] | None = None,
        fresh_since: float | None = None,
    ) -> tuple[list[str], str, str]:
        """(persona and folded summaries, the memory block, the profile block); a block is "" without its file.
        `known`: the summaries of `history` and its `chat_type_of`, when the session's memo has them;
        `fresh_since`: the memory files as new as every write completed before then (monotonic clock; None: now)."""
        folded, chat_type = (fold_system_messages(history), chat_type_of(history)) if known is None else known
        texts = [agent.persona, *folded]
        files = self.memory_files
        memory_name = files.memory_name(agent, key)
        profile_name = files.profile_name(agent, key, sender_id, chat_type)  # only the current sender's
        names = [memory_name] if profile_name is None else [memory_name, profile_name]
        memory, profile, *_ = [*await files.read_many(names, fresh_since=fresh_since), ""]  # one hop, or none
        memory_block = profile_block = ""
        if memory.strip():
            memory_block = f"{MEMORY_HEADER}\n\n" + cut_to_tokens(memory.strip(), self.budget.memory_tokens)
        if profile.strip():
            profile_block = f"{PROFILE_HEADER}\n\n" + cut_to_tokens(profile.strip(), self.budget.user_tokens)
        return texts, memory_block, profile_block

    async def estimate_prompt_tokens(
        self, agent: AgentDefinition, key: SessionKey, sender_id: str, history: list[Message], tools: list[Tool]
    ) -> int:
        """An offline estimate of the prompt a request for `history` carries: system blocks, messages as sent
        (old tool results cut, images not counted) and tool definitions."""
        system = await self.system_blocks(agent, key, sender_id, history)
        sent = cut_old_tool_results(to_api_messages(history, zone=self.zone), self.budget.old_tool_result_chars)
        return estimate_tokens(system) + estimate_tokens(sent) + estimate_tokens([t.definition() for t in tools])

    async def build(
        self,
        *,
        agent: AgentDefinition,
        key: SessionKey,
        sender_id: str,
        history: list[Message],
        tools: list[Tool],
        model: str,
        max_tokens: int,
        fresh_since: float | None = None,
    ) -> LLMRequest:
        """The request for `history`; its memory blocks as new as every write completed before `fresh_since`
        (monotonic clock; None: now): a turn passes when it began."""
        definitions = self._definitions(tools)
        memo = self._memo(key)
        conversation, folded, converted = settled_conversation(
            memo.settled,
            history,
            partial(to_conversation, zone=self.zone),
            drop_refused_turns,
            lambda whole: to_conversation(whole, memo, self.zone),
        )
        memo.computed += converted
        images = None
        at = Positions.of(conversation, memo.settled)
        refs = (
            [ref for _, _, ref in recent_image_refs(conversation, memo, at.openers)]
            if model not in self.text_only_models
            else []
        )
        if refs:
            images = await self.images.load(self.workspace_dir / agent.name, refs)
        messages = cut_old_tool_results(
            place_images(conversation, images, memo, at), self.budget.old_tool_result_chars, memo, at
        )
        self.last_computed = memo.settle()
        known = (folded, memo.settled.chat_type_of(history))
        texts, memory, profile = await self._system_parts(agent, key, sender_id, history, known, fresh_since)
        if self.memory_notes:  # an addition to MEMORY.md rides on a message while the chat's cache is warm
            memory, messages = self.notes.apply(key, memory, messages, self.cache_warm(str(key)))
        return LLMRequest(
            model=model,
            system=self._system(texts, memory, profile),
            messages=mark_newest_message(messages),
            tools=definitions,
            max_tokens=max_tokens,
            chat=str(key),
        )


def _marked_blocks(texts: list[str], memory: str, profile: str) -> list[dict[str, Any]]:
    """The system blocks, the last one marked for the cache."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": t} for t in [*texts, *(b for b in (memory, profile) if b)]]
    blocks[-1] = {**blocks[-1], "cache_control": CACHE}
    return blocks
