"""The L2 summary call: render old messages, ask the model for a merged `[历史摘要]`, and refuse bad answers."""

from __future__ import annotations

import json
from typing import Any

from agenthub.agent.conversion import SUMMARY_PREFIX
from agenthub.errors import AgentHubError
from agenthub.llm.tokens import estimate_text_tokens
from agenthub.llm.types import LLMProvider, LLMRequest
from agenthub.media.refs import media_text

Message = dict[str, Any]

SUMMARISER_SYSTEM = (
    "You are the conversation summariser of a chat assistant. The messages inside <conversation> will be "
    "removed from the assistant's working memory and replaced by your summary, so keep everything the next "
    "turns need. If a <previous-summary> is given, merge it with the new messages into ONE summary (keep what "
    "still matters, update what changed, drop what was superseded); never quote or nest the old summary.\n"
    "Write in the language of the conversation, as compact bullet points under these headings:\n"
    "## 用户意图 (what the user wants overall)\n"
    "## 决定 (decisions and agreed constraints)\n"
    "## 事实与标识符 (facts; keep names, ids, numbers, paths, URLs, dates exactly as written)\n"
    "## 未完成任务 (open tasks and unanswered requests)\n"
    "Do not continue the conversation and do not address the user. Output only the summary."
)
MESSAGE_CHARS = 1500
TOOL_CHARS = 500
FOCUS_CHARS = 500
"""A `/compact <focus>` text is cut to this many characters before it joins the summary request."""


class SummaryError(AgentHubError):
    """The summary call failed or its answer is unusable; the history must stay as it was."""


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split()) if len(text) > limit else text
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_content(content: Any, *, text_chars: int = MESSAGE_CHARS, tool_chars: int = TOOL_CHARS) -> str:
    """A readable one-message rendering: text, `[image: <path>]` (never the bytes), `[tool call …]` and
    `[tool result …]`, each clipped."""
    if isinstance(content, str):
        return _clip(content, text_chars)
    parts: list[str] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(_clip(str(block.get("text", "")), text_chars))
        elif kind == "image":
            parts.append(media_text(block) or "[image]")
        elif kind == "tool_use":
            args = json.dumps(block.get("input", {}), ensure_ascii=False)
            parts.append(_clip(f"[tool call {block.get('name')}({args})]", tool_chars))
        elif kind == "tool_result":
            inner = block.get("content")
            text = inner if isinstance(inner, str) else render_content(inner, text_chars=tool_chars)
            flag = " (error)" if block.get("is_error") else ""
            parts.append(_clip(f"[tool result{flag}: {text}]", tool_chars))
    return "\n".join(parts)


def render_messages(messages: list[Message], token_budget: int) -> str:
    """`role: text` lines, newest kept first when the budget is short (omitted ones stay in the archive)."""
    lines: list[str] = []
    used = 0
    for message in reversed(messages):
        line = f"{message.get('role', '?')}: {render_content(message.get('content'))}"
        cost = estimate_text_tokens(line) + 1
        if lines and used + cost > token_budget:
            lines.append(f"(… {len(messages) - len(lines)} older messages omitted …)")
            break
        lines.append(line)
        used += cost
    return "\n".join(reversed(lines))


def strip_prefix(summary: str) -> str:
    """The summary text without its `[历史摘要]` marker."""
    text = summary.strip()
    return text[len(SUMMARY_PREFIX) :].strip() if text.startswith(SUMMARY_PREFIX) else text


def summary_request(
    model: str,
    previous: list[str],
    head: list[Message],
    *,
    input_budget: int,
    max_tokens: int,
    focus: str = "",
) -> LLMRequest:
    """The summary call; `focus` (from `/compact <focus>`) becomes one extra instruction, length-capped."""
    parts = []
    if previous:
        merged = "\n\n".join(strip_prefix(p) for p in previous)
        parts.append(f"<previous-summary>\n{_clip(merged, input_budget)}\n</previous-summary>")
    parts.append(f"<conversation>\n{render_messages(head, input_budget)}\n</conversation>")
    focus = _clip(focus.strip(), FOCUS_CHARS)
    if focus:
        parts.append(f"Focus the summary on: {focus}")
    parts.append("Write the merged summary now.")
    return LLMRequest(
        model=model,
        system=[{"type": "text", "text": SUMMARISER_SYSTEM}],
        messages=[{"role": "user", "content": "\n\n".join(parts)}],
        tools=[],
        max_tokens=max_tokens,
        purpose="summary",
    )


async def summarise(provider: LLMProvider, request: LLMRequest, original_tokens: int) -> str:
    """Run the call; the `[历史摘要] …` text, or `SummaryError` if it failed, is empty, cut off or too long."""
    try:
        response = await provider.complete(request)
    except AgentHubError as e:
        raise SummaryError(f"summary call failed: {e}") from e
    text = strip_prefix(response.text)
    if not text:
        raise SummaryError("summary is empty")
    if response.stop_reason == "max_tokens" or response.stop_reason is None:
        raise SummaryError("summary was cut off")
    if estimate_text_tokens(text) >= original_tokens:
        raise SummaryError("summary is not shorter than what it replaces")
    return f"{SUMMARY_PREFIX}\n{text}"
