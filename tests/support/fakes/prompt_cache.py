"""A simulation of Anthropic's prompt cache for the fake Messages API: what a request reads and writes.

The request is cut into blocks in the order the API caches them (tools, system blocks, message content blocks),
each block's prefix hashed (without its `cache_control` mark: a moving breakpoint is no change). A breakpoint
looks back up to `LOOKBACK` blocks for the longest prefix written before and still alive; the request reads that,
and writes every breakpoint's prefix beyond it. Entries live `ttl_s` (5 minutes, 1 hour for `"ttl": "1h"`), renewed
by every read; prefixes shorter than `min_tokens` are never cached. With `diagnostics` in the body it also answers
Anthropic's cache diagnostics (`cache_miss_reason`) by comparing with the request of `previous_message_id`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

LOOKBACK = 20
SHORT_TTL_S = 300.0
LONG_TTL_S = 3600.0


def _tokens(value: Any) -> int:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return max(1, len(text) // 4)


def _bare(block: Any) -> Any:
    if isinstance(block, dict):
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


def _ttl(block: Any) -> float | None:
    mark = block.get("cache_control") if isinstance(block, dict) else None
    if not isinstance(mark, dict):
        return None
    return LONG_TTL_S if mark.get("ttl") == "1h" else SHORT_TTL_S


def _blocks(body: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(part, block) in cache order."""
    for tool in body.get("tools") or []:
        yield "tools", tool
    system = body.get("system") or []
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else system:
        yield "system", block
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):  # the same prompt as one text block
            content = [{"type": "text", "text": content}]
        for i, block in enumerate(content or []):
            fields = block if isinstance(block, dict) else {}
            yield "messages", {"role": message.get("role"), "first": i == 0, **fields}


@dataclass
class _Shape:
    model: str
    tools: str
    system: str
    messages: list[str]


def _shape(body: dict[str, Any]) -> _Shape:
    def h(value: Any) -> str:
        return hashlib.sha256(json.dumps(value, ensure_ascii=False, sort_keys=True).encode()).hexdigest()

    tools = [_bare(t) for t in body.get("tools") or []]
    system = body.get("system") or []
    system = [_bare(b) for b in system] if isinstance(system, list) else system
    messages = []
    for m in body.get("messages") or []:
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        messages.append(h({**m, "content": [_bare(b) for b in blocks]}))
    return _Shape(str(body.get("model")), h(tools), h(system), messages)


@dataclass
class PromptCache:
    """The cache of one fake server (every key and chat share it, as one organisation's do)."""

    clock: Callable[[], float] = time.monotonic
    min_tokens: int = 1024
    entries: dict[str, float] = field(default_factory=dict)
    """prefix hash -> expiry."""
    shapes: dict[str, _Shape] = field(default_factory=dict)

    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        now = self.clock()
        digest = hashlib.sha256(str(body.get("model")).encode())
        prefix: list[tuple[str, int, float | None]] = []  # (hash, tokens so far, ttl when a breakpoint)
        total = 0
        for _, block in _blocks(body):
            digest.update(json.dumps(_bare(block), ensure_ascii=False, sort_keys=True).encode())
            total += _tokens(_bare(block))
            prefix.append((digest.copy().hexdigest(), total, _ttl(block)))
        read_at = -1
        breakpoints = [i for i, (_, _, ttl) in enumerate(prefix) if ttl is not None]
        for b in breakpoints:
            for p in range(b, max(-1, b - LOOKBACK), -1):
                if self.entries.get(prefix[p][0], -1.0) >= now:
                    read_at = max(read_at, p)
                    break
        read = prefix[read_at][1] if read_at >= 0 else 0
        if read_at >= 0:
            renew = max((t for _, _, t in prefix[: read_at + 1] if t is not None), default=SHORT_TTL_S)
            self.entries[prefix[read_at][0]] = now + renew
        written_to = read
        for b in breakpoints:
            key, tokens, mark = prefix[b]
            lifetime = mark or SHORT_TTL_S
            if b > read_at and tokens >= self.min_tokens:
                self.entries[key] = now + lifetime
                written_to = max(written_to, tokens)
            elif b <= read_at and key in self.entries:
                self.entries[key] = max(self.entries.get(key, 0.0), now + lifetime)
        return {
            "input_tokens": total - written_to,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": written_to - read,
        }

    def diagnose(self, body: dict[str, Any], message_id: str) -> dict[str, Any] | None:
        """The `diagnostics` object of the reply to `body` (None when the body asked for none)."""
        asked = body.get("diagnostics")
        if not isinstance(asked, dict):
            return None
        shape = _shape(body)
        self.shapes[message_id] = shape
        previous_id = asked.get("previous_message_id")
        if previous_id is None:
            return None
        previous = self.shapes.get(str(previous_id))
        if previous is None:
            return {"cache_miss_reason": {"type": "previous_message_not_found"}}
        for kind, changed in (
            ("model_changed", previous.model != shape.model),
            ("tools_changed", previous.tools != shape.tools),
            ("system_changed", previous.system != shape.system),
            ("messages_changed", shape.messages[: len(previous.messages)] != previous.messages),
        ):
            if changed:
                return {"cache_miss_reason": {"type": kind, "cache_missed_input_tokens": _tokens(body.get("messages"))}}
        return None
