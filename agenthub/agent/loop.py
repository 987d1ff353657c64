"""The agent loop: stream a reply, run tool calls, repeat until a final answer or the iteration bound."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from agenthub.agent.tools import Tool, ToolContext, run_tool
from agenthub.llm.types import LLMProvider, LLMRequest, LLMResponse
from agenthub.messages import DeltaEvent, ReplyEvent, ToolEvent, Usage

log = structlog.get_logger(__name__)

Message = dict[str, Any]
Emit = Callable[[ReplyEvent], None]
CallObserver = Callable[[float, Usage], None]
TRUNCATED_NOTE = "\n\n(The reply was cut off before it finished.)"


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


def _stored_content(response: LLMResponse) -> str | list[dict[str, Any]]:
    """Plain text replies are stored as a string; anything with tool calls keeps its content blocks."""
    if response.tool_uses:
        return response.content
    return response.text


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
        on_call: CallObserver | None = None,
    ) -> None:
        self.provider = provider
        self.model = model
        self.max_tokens = max_tokens
        self.max_iterations = max_iterations
        self._gate = llm_gate
        self._on_call = on_call

    async def _call(self, request: LLMRequest, emit: Emit, result: TurnResult) -> LLMResponse:
        started = False

        def on_text(delta: str) -> None:
            nonlocal started
            if not started and result.text:
                emit(DeltaEvent("\n\n"))
            started = True
            emit(DeltaEvent(delta))

        async with self._gate:
            began = time.perf_counter()
            response = await self.provider.stream(request, on_text)
        seconds = time.perf_counter() - began
        log.info(  # one line per model call, so token spend is always visible
            "llm_call",
            provider=self.provider.name,
            model=self.model,
            seconds=round(seconds, 3),
            stop_reason=response.stop_reason,
            **response.usage.as_dict(),
        )
        if self._on_call is not None:
            self._on_call(seconds, response.usage)
        result.calls += 1
        result.usage = result.usage + response.usage
        result.last_usage = response.usage
        return response

    async def run(self, request: LLMRequest, tools: list[Tool], tool_ctx: ToolContext, emit: Emit) -> TurnResult:
        result = TurnResult()
        messages = list(request.messages)
        for _ in range(self.max_iterations):
            call = replace(request, model=self.model, max_tokens=self.max_tokens, messages=messages)
            response = await self._call(call, emit, result)
            text = response.text
            if response.stop_reason is None:
                text += TRUNCATED_NOTE
                emit(DeltaEvent(TRUNCATED_NOTE))
            result.texts.append(text)
            assistant = {"role": "assistant", "content": _stored_content(response)}
            if response.stop_reason is None and isinstance(assistant["content"], str):
                assistant["content"] = text
            result.new_messages.append(assistant)
            if response.stop_reason != "tool_use" or not response.tool_uses:
                return result
            results = await self._run_tools(response.tool_uses, tools, tool_ctx, emit)
            result.new_messages.append(results)
            messages = [*messages, {"role": "assistant", "content": response.content}, results]
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
            emit(ToolEvent(name, "end", is_error=is_error))
            log.info("tool_called", tool=name, is_error=is_error)
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.get("id"), "content": output}
            if is_error:
                block["is_error"] = True
            blocks.append(block)
        return {"role": "user", "content": blocks}
