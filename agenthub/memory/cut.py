"""Where compaction may cut a history: never between a `tool_use` and its `tool_result`, preferably at a turn start."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agenthub.llm.tokens import estimate_tokens

Message = dict[str, Any]


def _blocks(message: Message, block_type: str) -> list[dict[str, Any]]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == block_type]


def tool_use_ids(message: Message) -> list[str]:
    return [str(b.get("id")) for b in _blocks(message, "tool_use")]


def tool_result_ids(message: Message) -> list[str]:
    return [str(b.get("tool_use_id")) for b in _blocks(message, "tool_result")]


def is_turn_start(message: Message) -> bool:
    """A user message that is not a tool result: the point where a new exchange begins."""
    return message.get("role") == "user" and not tool_result_ids(message)


def answers_previous(history: list[Message], index: int) -> bool:
    """True when message `index` holds a `tool_result` for a `tool_use` of the message right before it.

    A result always answers the message before it (the Messages API requires it), so that is how a pair is
    found: never by id across the whole history, since some vendors reuse ids every turn (Kimi-style
    `functions.get_time:0`) and an id seen again later is another call.
    """
    if index <= 0 or index >= len(history):
        return False
    return bool(set(tool_result_ids(history[index])) & set(tool_use_ids(history[index - 1])))


def pair_safe_cuts(history: list[Message]) -> list[bool]:
    """`safe[c]` is True when cutting before message `c` separates no `tool_use` from the result answering it."""
    return [not answers_previous(history, c) for c in range(len(history) + 1)]


def unpaired_tool_ids(history: list[Message]) -> set[str]:
    """Ids of `tool_use` blocks with no `tool_result` in the next message, and results with no use before them."""
    bad: set[str] = set()
    for i, message in enumerate(history):
        following = history[i + 1] if i + 1 < len(history) else {}
        previous = history[i - 1] if i > 0 else {}
        bad |= set(tool_use_ids(message)) - set(tool_result_ids(following))
        bad |= set(tool_result_ids(message)) - set(tool_use_ids(previous))
    return bad


def safe_cut(history: list[Message], target: int) -> int:
    """The latest cut at or before `target` that keeps tool pairs together, 0 when there is none.

    A cut before a turn-starting user message is preferred (the kept part then opens like a conversation);
    failing that, any non-system message whose cut separates no pair.
    """
    target = max(0, min(target, len(history)))
    safe = pair_safe_cuts(history)
    for c in range(target, 0, -1):
        if c < len(history) and safe[c] and is_turn_start(history[c]):
            return c
    for c in range(target, 0, -1):
        if c < len(history) and safe[c] and history[c].get("role") != "system":
            return c
    return 0


@dataclass(frozen=True)
class Cut:
    """A planned compaction: `history[:index]` goes (earlier summaries and the summarised messages)."""

    index: int
    previous_summaries: list[str]
    head: list[Message]
    tail: list[Message]


def plan_cut(history: list[Message], keep: int, tail_token_budget: int | None = None) -> Cut | None:
    """Keep at most the last `keep` messages (fewer if they exceed `tail_token_budget`), cut safely; None if
    there is nothing to summarise."""
    kept, used = 0, 0
    for message in reversed(history):
        if kept >= keep:
            break
        cost = estimate_tokens(message.get("content"))
        if tail_token_budget is not None and kept > 0 and used + cost > tail_token_budget:
            break
        kept, used = kept + 1, used + cost
    index = safe_cut(history, len(history) - kept)
    head = history[:index]
    conversation = [m for m in head if m.get("role") != "system"]
    if not conversation:
        return None
    summaries = [str(m.get("content")) for m in head if m.get("role") == "system"]
    return Cut(index, summaries, conversation, history[index:])
