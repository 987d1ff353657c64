"""The request body: byte for byte what encoding the whole request gives, also when a chat's call repeats parts."""

from __future__ import annotations

import json
import random
from typing import Any

from agenthub.llm.sdk import request_body
from agenthub.llm.types import LLMRequest

SYSTEM = [{"type": "text", "text": "You are terse. 你好", "cache_control": {"type": "ephemeral"}}]
TOOLS = [{"name": "read_memory", "description": "d", "input_schema": {"type": "object"}}]


def _whole(request: LLMRequest, diagnostics: dict[str, Any] | None = None) -> bytes:
    body: dict[str, Any] = {"max_tokens": request.max_tokens, "messages": request.messages, "model": request.model}
    if diagnostics is not None:
        body["diagnostics"] = diagnostics
    body["stream"] = True
    if request.system:
        body["system"] = request.system
    if request.tool_choice is not None:
        body["tool_choice"] = request.tool_choice
    if request.tools:
        body["tools"] = request.tools
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def test_a_chats_growing_calls_encode_as_the_whole_request() -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "q0"}]
    for turn in range(3):
        request = LLMRequest(
            "m", SYSTEM, list(messages), TOOLS, 256, chat="default:cli:c1", tool_choice={"type": "auto"}
        )
        assert request_body(request) == _whole(request)
        assert json.loads(request_body(request, {"previous_message_id": "msg_1"}))["diagnostics"] is not None
        messages += [{"role": "assistant", "content": f"a{turn}"}, {"role": "user", "content": f"q{turn + 1} ü"}]
    edited = [{"role": "user", "content": "edited"}, *messages[1:]]
    request = LLMRequest("m", SYSTEM, edited, TOOLS, 256, chat="default:cli:c1")
    assert request_body(request) == _whole(request)


def test_a_call_without_chat_system_or_tools() -> None:
    request = LLMRequest("m", [], [{"role": "user", "content": "hi"}], [], 10)
    assert request_body(request) == _whole(request)
    assert request_body(request, {"previous_message_id": None}) == _whole(request, {"previous_message_id": None})


def test_a_chats_buffer_kept_over_appends_edits_compactions_and_marks_moving_encodes_as_the_whole() -> None:
    """The chat's joined JSON carried from call to call: appended messages, the newest message re-marked (a new
    object in the last place), a compaction (fewer messages), an edit in the middle, an empty list, another chat's
    calls in between: every body is the whole request encoded afresh."""
    rng = random.Random(5)
    messages: list[dict[str, Any]] = []
    for step in range(200):
        change = rng.random()
        if change < 0.05:
            messages = messages[-rng.randrange(1, 4) :] if messages else []
        elif change < 0.1 and len(messages) > 3:
            at = rng.randrange(len(messages))
            messages = [*messages[:at], {"role": "user", "content": f"edited {step} ü"}, *messages[at + 1 :]]
        elif change < 0.12:
            messages = []
        else:
            plain = [{"role": "assistant", "content": f"a{step}"}, {"role": "user", "content": f"q{step} 你好"}]
            messages = [*messages, *plain[: rng.randrange(1, 3)]]
        sent = list(messages)
        if sent and rng.random() < 0.5:  # the newest message carries the cache mark: a new object each call
            sent[-1] = {
                **sent[-1],
                "content": [{"type": "text", "text": "marked", "cache_control": {"type": "ephemeral"}}],
            }
        chat = rng.choice(["default:cli:c1", "default:cli:c2"])
        request = LLMRequest("m", SYSTEM, sent, TOOLS, 256, chat=chat)
        assert request_body(request) == _whole(request), step
