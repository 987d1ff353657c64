"""The agent loop: stream a reply, run tool calls, repeat until a final answer or the iteration bound."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from agenthub import i18n
from agenthub.agent.conversion import mark_newest_message
from agenthub.agent.large_results import LargeResultStore
from agenthub.agent.tools import Tool, ToolContext, run_tool
from agenthub.llm.types import LLMProvider, LLMRequest, LLMResponse
from agenthub.messages import DeltaEvent, ReplyEvent, ToolEvent, Usage

log = structlog.get_logger(__name__)

Message = dict[str, Any]
Emit = Callable[[ReplyEvent], None]
CUT_NOTES: dict[str | None, str] = {
    None: "loop.cut",
    "max_tokens": "loop.cut.max_tokens",
    "model_context_window_exceeded": "loop.cut.context_window",
}
"""The catalogue key of the note added to a reply the model stopped early, by stop reason."""
REFUSAL_TEXT = "loop.refusal"
REFUSAL_NOTE = "loop.refusal.note"
EMPTY_REPLY = "loop.empty_reply"
EMPTY_STORED = "(no further text)"
"""Stored for a final call without text after earlier text in the same turn: the API rejects empty messages."""


@dataclass
class TurnResult:
    """What one turn produced: the messages to store, the text shown, and token usage."""

    new_messages: list[Message] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    last_usage: Usage = field(default_factory=Usage)
    calls: int = 0

    @property
    def text(self) -> str:
        return "\n\n".join(t for t in self.texts if t)


def _closing_note(response: LLMResponse, shown_before: bool, locale: str) -> str:
    """What to add after the final call's text: a note on an unusual stop reason, or a fallback for no text."""
    reason, text = response.stop_reason, response.text
    if reason == "refusal":
        return i18n.text(REFUSAL_NOTE if text else REFUSAL_TEXT, locale)
    if reason in CUT_NOTES:
        return i18n.text(CUT_NOTES[reason], locale)
    return "" if text or shown_before else i18n.text(EMPTY_REPLY, locale)


def _finish(response: LLMResponse, emit: Emit, result: TurnResult, locale: str) -> None:
    """Record the final call: its text plus any note (emitted too), stored as plain text, never empty.

    Tool calls in a final reply (one cut at `max_tokens`) are not stored: they have no results. A refused
    reply is flagged so the context builder leaves the refused turn out of later requests.
    """
    text = response.text
    shown_before = bool(text or result.text)
    note = _closing_note(response, shown_before, locale)
    if note:
        emit(DeltaEvent(("\n\n" if shown_before else "") + note))
        text = f"{text}\n\n{note}" if text else note
    result.texts.append(text)
    assistant: Message = {"role": "assistant", "content": text or EMPTY_STORED}
    if response.stop_reason == "refusal":
        assistant["refusal"] = True
    if response.stop_reason != "end_turn":
        log.info("llm_unusual_stop", stop_reason=response.stop_reason, text_chars=len(response.text))
    result.new_messages.append(assistant)


class AgentLoop:
    """Runs one turn against one provider and model.

    Every model call passes through `llm_gate` (the global cap on concurrent calls). Text deltas are
    emitted as they arrive; between two model calls that both produced text a "\\n\\n" delta is emitted,
    so the concatenated deltas always equal `TurnResult.text`. Tool errors go back to the model.
    """

    def __init__(
        self,
        provider: LLMProvider,
        model: str,
        *,
        max_tokens: int,
        max_iterations: int,
        llm_gate: asyncio.Semaphore,
        large_results: LargeResultStore | None = None,
    ) -> None:
        self.provider = provider
        self.large_results = large_results
        self.model = model
        self.max_tokens = max_tokens
        self.max_iterations = max_iterations
        self._gate = llm_gate

    async def _call(self, request: LLMRequest, emit: Emit, result: TurnResult) -> LLMResponse:
        started = False

        def on_text(delta: str) -> None:
            nonlocal started
            if not started and result.text:
                emit(DeltaEvent("\n\n"))
            started = True
            emit(DeltaEvent(delta))

        async with self._gate:  # the provider logs the call (`llm_call`, purpose=turn) and tells the stats
            response = await self.provider.stream(request, on_text)
        result.calls += 1
        result.usage = result.usage + response.usage
        result.last_usage = response.usage
        return response

    async def run(self, request: LLMRequest, tools: list[Tool], tool_ctx: ToolContext, emit: Emit) -> TurnResult:
        result = TurnResult()
        added: list[Message] = []  # this turn's tool round trips; the newest carries a cache breakpoint
        for _ in range(self.max_iterations):
            messages = [*(_without_tail(request) if added else request.messages), *mark_newest_message(added)]
            purpose = "job" if request.purpose == "job" else "turn"  # a scheduled prompt's turn is counted as a job
            call = replace(request, model=self.model, max_tokens=self.max_tokens, messages=messages, purpose=purpose)
            response = await self._call(call, emit, result)
            if response.stop_reason != "tool_use" or not response.tool_uses:
                _finish(response, emit, result, request.locale)
                return result
            result.texts.append(response.text)
            result.new_messages.append({"role": "assistant", "content": response.content})
            results = await self._run_tools(response.tool_uses, tools, tool_ctx, emit)
            result.new_messages.append(results)
            added += [{"role": "assistant", "content": response.content}, results]
        note = f"(Stopped after {self.max_iterations} tool steps without a final answer.)"
        emit(DeltaEvent(("\n\n" if result.text else "") + note))
        result.texts.append(note)
        result.new_messages.append({"role": "assistant", "content": note})
        return result

    async def _run_tools(self, calls: list[dict[str, Any]], tools: list[Tool], ctx: ToolContext, emit: Emit) -> Message:
        blocks = []
        for call in calls:
            name = str(call.get("name"))
            raw_args = call.get("input")
            args: dict[str, Any] = raw_args if isinstance(raw_args, dict) else {}
            emit(ToolEvent(name, "start"))
            output, is_error = await run_tool(tools, name, args, ctx)
            output = await self._keep(name, output)
            emit(ToolEvent(name, "end", is_error=is_error))
            log.info("tool_called", tool=name, is_error=is_error)
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.get("id"), "content": output}
            if is_error:
                block["is_error"] = True
            blocks.append(block)
        return {"role": "user", "content": blocks}

    async def _keep(self, tool: str, output: str) -> str:
        """A large result moved to a file (its preview kept); if the file cannot be written, the whole text."""
        if self.large_results is None:
            return output
        try:
            return await self.large_results.keep(tool, output)
        except OSError as e:
            log.error("tool_result_move_failed", tool=tool, chars=len(output), error=type(e).__name__)
            return output


def _without_tail(request: LLMRequest) -> list[Message]:
    """The request's messages without the blocks only its first call carries (`LLMRequest.first_call_tail`)."""
    if request.first_call_tail <= 0 or not request.messages:
        return request.messages
    newest = request.messages[-1]
    content = newest.get("content")
    if not isinstance(content, list):
        return request.messages
    return [*request.messages[:-1], {**newest, "content": content[: -request.first_call_tail]}]
