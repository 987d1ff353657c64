"""The reply a streamed Messages API call describes, built from its events as plain dicts: what `messages.stream`
accumulates, for the fields a response keeps, without a typed event object per delta or a snapshot per event."""

from __future__ import annotations

import json
from typing import Any

from agenthub.jsonsafe import without_lone_surrogates
from agenthub.llm.types import LLMResponse, TextCallback
from agenthub.messages import Usage

__all__ = ["ReplyBuilder", "cache_miss_reason"]

_USAGE_KINDS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


class ReplyBuilder:
    """The message a stream of Messages API events describes, as plain dicts (what `messages.stream` accumulates,
    for the fields a response keeps): text and thinking deltas joined once at the end, a tool call's input parsed
    from its JSON pieces once its block is complete."""

    def __init__(self, on_text: TextCallback) -> None:
        self.on_text = on_text
        self.started = False
        self.message: dict[str, Any] = {}
        self.usage: dict[str, Any] = {}
        self.blocks: list[dict[str, Any]] = []
        self.parts: list[list[str]] = []
        """Per block: the text (or thinking, or tool input JSON) pieces received so far."""
        self.stop_reason: str | None = None
        self.held: dict[int, str] = {}
        """Per text block: a high surrogate a piece ended in, held for the next piece (its other half may be there)."""

    def take(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "content_block_delta":
            self._delta(event)
        elif kind == "message_start":
            self.started = True
            self.message = event.get("message") or {}
            self.usage = dict(self.message.get("usage") or {})
        elif kind == "content_block_stop":
            self._release_held(event.get("index"))
        elif kind == "content_block_start":
            self.blocks.append(dict(event.get("content_block") or {}))
            self.parts.append([])
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            self.stop_reason = delta.get("stop_reason")
            usage = event.get("usage") or {}
            self.usage["output_tokens"] = usage.get("output_tokens")
            for name, value in usage.items():  # cumulative totals: a value given overwrites the start's
                if name != "output_tokens" and value is not None:
                    self.usage[name] = value

    def _delta(self, event: dict[str, Any]) -> None:
        index, delta = event.get("index"), event.get("delta") or {}
        if not isinstance(index, int) or not 0 <= index < len(self.blocks):
            return
        block, kind = self.blocks[index], delta.get("type")
        if kind == "text_delta" and block.get("type") == "text":
            text = self._whole(index, str(delta.get("text", "")))
            if text:
                self.parts[index].append(text)
                self.on_text(text)
        elif kind == "input_json_delta":
            self.parts[index].append(str(delta.get("partial_json", "")))
        elif kind == "thinking_delta" and block.get("type") == "thinking":
            self.parts[index].append(str(delta.get("thinking", "")))
        elif kind == "signature_delta" and block.get("type") == "thinking":
            block["signature"] = delta.get("signature")
        elif kind == "citations_delta" and block.get("type") == "text":
            block.setdefault("citations", []).append(delta.get("citation"))

    def _whole(self, index: int, text: str) -> str:
        """The piece as it is handed on: after the high surrogate held from the piece before, a high surrogate it
        ends in held for the next one, every other surrogate joined with its pair or U+FFFD (UTF-8 cannot carry
        half a pair: a WeCom frame, a Feishu card, a memory file or the database would refuse the text)."""
        held = self.held.pop(index, "")
        if held:
            text = held + text
        if text and "\ud800" <= text[-1] <= "\udbff":
            self.held[index] = text[-1]
            text = text[:-1]
        return without_lone_surrogates(text)

    def _release_held(self, index: object) -> None:
        """The block ended (or the stream did) with a high surrogate held: it had no other half, U+FFFD."""
        if isinstance(index, int) and self.held.pop(index, None) is not None:
            self.parts[index].append("\ufffd")
            self.on_text("\ufffd")

    def response(self) -> LLMResponse:
        for index in list(self.held):  # a stream cut inside a block
            self._release_held(index)
        usage = Usage(**{name: int(self.usage.get(name) or 0) for name in _USAGE_KINDS})
        content = [_final_block(block, parts) for block, parts in zip(self.blocks, self.parts, strict=True)]
        return LLMResponse(
            content=content,
            stop_reason=self.stop_reason,
            usage=usage,
            model=str(self.message.get("model") or ""),
            message_id=str(self.message.get("id") or ""),
            cache_miss_reason=cache_miss_reason(self.message),
        )


def _final_block(block: dict[str, Any], parts: list[str]) -> dict[str, Any]:
    """The block as the response keeps it (the shape `_block_dict` gave the SDK's typed blocks)."""
    kind = block.get("type")
    if kind == "text":  # the pieces came clean (`ReplyBuilder._whole`); the block's starting text too
        return {"type": "text", "text": without_lone_surrogates(str(block.get("text") or "") + "".join(parts))}
    if kind == "tool_use":
        return {
            "type": "tool_use",
            "id": block.get("id"),
            "name": block.get("name"),
            "input": _tool_input(block, parts),
        }
    if kind == "thinking":
        thinking = str(block.get("thinking") or "") + "".join(parts)
        return {"type": "thinking", "thinking": thinking, "signature": block.get("signature")}
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.get("data")}
    if parts and "input" in block:  # a server tool's call: its input streams as JSON too
        block = {**block, "input": _tool_input(block, parts)}
    kept: dict[str, Any] = _without_nones(block)
    return kept


def _tool_input(block: dict[str, Any], parts: list[str]) -> dict[str, Any]:
    """The tool call's input: its streamed JSON parsed (a stream cut inside it leaves what was complete: nothing),
    else the input it started with."""
    text = "".join(parts)
    if text:
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
        return {}
    start = block.get("input")
    return dict(start) if isinstance(start, dict) else {}


def _without_nones(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nones(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nones(v) for v in value]
    return value


def cache_miss_reason(message: dict[str, Any]) -> dict[str, Any] | None:
    """`diagnostics.cache_miss_reason` of the reply as plain data (`{"type": …, "cache_missed_input_tokens": …}`);
    None when the request asked for no diagnostics, nothing diverged, or the diagnosis was still pending."""
    diagnostics = message.get("diagnostics")
    reason = diagnostics.get("cache_miss_reason") if isinstance(diagnostics, dict) else None
    if not isinstance(reason, dict):
        return None
    kept: dict[str, Any] = _without_nones(reason)
    return kept
