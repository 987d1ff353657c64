"""`CacheWatch`: per chat, the previous model call's prompt fingerprint and what it left in the vendor's prompt cache.

A call that reads less from the cache than the previous call of the same chat left there (its cache read + cache
write, the prefix up to its last breakpoint) is a break: counted by cause for /metrics and logged once as
`prompt_cache_break`. The cause is the first part of the prompt that differs, in the order the vendor caches it
(model, tools, system blocks, messages), or `ttl_expired` when the previous call is older than the cache's lifetime.
"""

from __future__ import annotations

import hashlib
import json
import operator
import time
import urllib.parse
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import structlog

from agenthub.jsonsafe import utf8_replacing
from agenthub.llm.identity import ByIdentity, PerChat, Repeated, drop_chat
from agenthub.llm.types import LLMRequest, LLMResponse

log = structlog.get_logger(__name__)

WATCHED_PURPOSES = frozenset({"turn", "job"})
"""Calls that make up a chat's conversation; summaries, L3, titles build other prompts and are not compared."""
CHATS = 4096
"""Chats whose previous call is remembered (least recently used dropped first)."""
RECENT_CALLS = 20
"""Calls per chat the hit rate in /status is taken over."""
DEFAULT_TTL_S = 300.0
LONG_TTL_S = 3600.0
"""The cache's lifetime: 5 minutes, or 1 hour when a breakpoint asks for `"ttl": "1h"`; each read renews it."""
TOLERANCE = 0.02
"""A read this much short of what the previous call left cached is still no break (vendors round their counts)."""
CAUSES = ("model_changed", "tools_changed", "system_changed", "messages_changed", "ttl_expired", "unknown")

MEMORY_HEADER = "# Long-term memory (MEMORY.md)"
PROFILE_HEADER = "# About the user (USER.md)"
HISTORY_REASONS = {"replace": "compaction", "clear": "restart", "delete": "restart", "reload": "other_instance"}
"""What a history change other than an append means for the next call's messages."""

_DIGEST = 8
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


ANTHROPIC_API_HOST = "api.anthropic.com"


def anthropic_api(base_url: str) -> bool:
    """Whether `base_url` is Anthropic's own API (the only vendor with cache diagnostics), not a compatible one."""
    parts = urllib.parse.urlsplit(base_url.strip())
    return parts.scheme == "https" and (parts.hostname or "").lower() == ANTHROPIC_API_HOST


def _digest(value: Any) -> bytes:
    return hashlib.blake2b(utf8_replacing(_encode(value)), digest_size=_DIGEST).digest()


def _bare(block: Any) -> Any:
    """A block without its `cache_control` mark: a breakpoint that moves is no change of the prefix."""
    if isinstance(block, dict) and "cache_control" in block:
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


def _bare_message(message: dict[str, Any]) -> Any:
    """The message as the vendor reads it: text content as one text block (the newest message is sent as blocks,
    to carry its mark, and as text again later), no marks."""
    content = message.get("content")
    if isinstance(content, str):
        return {**message, "content": [{"type": "text", "text": content}]}
    if isinstance(content, list) and any(isinstance(b, dict) and "cache_control" in b for b in content):
        return {**message, "content": [_bare(b) for b in content]}
    return message


def system_label(index: int, block: dict[str, Any]) -> str:
    """Which part of the system prompt `block` is: persona (the first), memory, profile, or a summary."""
    if index == 0:
        return "persona"
    text = str(block.get("text", ""))
    if text.startswith(MEMORY_HEADER):
        return "memory"
    if text.startswith(PROFILE_HEADER):
        return "profile"
    return "summary"


def _long_ttl(blocks: Iterable[Any]) -> bool:
    """Whether a breakpoint among `blocks` asks for the 1-hour cache."""
    for block in blocks:
        if isinstance(block, dict) and isinstance(mark := block.get("cache_control"), dict) and mark.get("ttl") == "1h":
            return True
    return False


_first = operator.itemgetter(0)


def _message_print(message: dict[str, Any]) -> tuple[bytes, bool]:
    """(the message's digest, whether one of its blocks asks for the 1-hour cache)."""
    content = message.get("content")
    return _digest(_bare_message(message)), isinstance(content, list) and _long_ttl(content)


MEMO_CHATS = 128
"""Chats whose previous request's per-message digests are kept for the next call (the most recently watched)."""


class MessagePrints(Repeated[dict[str, Any], tuple[bytes, bool]]):
    """A chat's previous request's messages and their `_message_print`s, with the digests joined and the first
    message that asks for the 1-hour cache: a request that repeats them (the same objects: the context builder's
    memo hands the same converted message every turn, and no message is changed in place) reuses their digests and
    that state, so a call's fingerprint costs what was appended, not the whole conversation."""

    __slots__ = ("_joined_of", "first_long", "joined")

    def __init__(self) -> None:
        super().__init__(_message_print)
        self.joined = b""
        self.first_long = -1
        """The index of the first message with a 1-hour mark (-1: none)."""
        self._joined_of: list[tuple[bytes, bool]] = self.results
        """The prints `joined` and `first_long` were taken over."""

    def digests(self, messages: list[dict[str, Any]]) -> tuple[bytes, bool]:
        """(the messages' digests joined, whether one of them asks for the 1-hour cache)."""
        synced = self.results is self._joined_of
        prints = self._joined_of = self(messages)
        kept = self.kept if synced else 0
        appended = prints[kept:]
        self.joined = self.joined[: kept * _DIGEST] + b"".join(map(_first, appended))
        if self.first_long >= kept:
            self.first_long = -1
        if self.first_long < 0:
            self.first_long = next((kept + i for i, (_, long) in enumerate(appended) if long), -1)
        return self.joined, self.first_long >= 0


def message_prints() -> MessagePrints:
    return MessagePrints()


def _system_digest(system: list[dict[str, Any]]) -> tuple[tuple[str, bytes], ...]:
    return tuple((system_label(i, b), _digest(_bare(b))) for i, b in enumerate(system))


def _tools_digest(tools: list[dict[str, Any]]) -> tuple[bytes, bool]:
    return _digest([_bare(t) for t in tools]), _long_ttl(tools)


_system_digests = ByIdentity(_system_digest)
_tools_digests = ByIdentity(_tools_digest)
"""The context builder hands the same system blocks and tool definitions while they do not change."""


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What decides a request's cache prefix, in the vendor's order: model, tools, system blocks, messages (one
    digest per message, so the length of the common prefix says how far two requests agree)."""

    model: str
    tools: bytes
    system: tuple[tuple[str, bytes], ...]
    messages: bytes
    ttl_s: float

    @classmethod
    def of(cls, request: LLMRequest, known: MessagePrints | None = None) -> Fingerprint:
        """The request's fingerprint; `known` (the chat's previous messages) spares re-digesting repeated ones."""
        system = _system_digests(request.system)
        messages, messages_long = (known or message_prints()).digests(request.messages)
        tools, tools_long = _tools_digests(request.tools)
        long_ttl = _long_ttl(request.system) or tools_long or messages_long
        return cls(request.model, tools, system, messages, LONG_TTL_S if long_ttl else DEFAULT_TTL_S)

    @property
    def message_count(self) -> int:
        return len(self.messages) // _DIGEST

    def common_messages(self, other: Fingerprint) -> int:
        """How many leading messages the two requests share."""
        n = min(self.message_count, other.message_count)
        for i in range(n):
            at = i * _DIGEST
            if self.messages[at : at + _DIGEST] != other.messages[at : at + _DIGEST]:
                return i
        return n


@dataclass(frozen=True, slots=True)
class CacheBreak:
    """One named break: `cause`, and for `system_changed` the `block`, for `messages_changed` the `reason`."""

    cause: str
    block: str | None = None
    reason: str | None = None
    matched_messages: int | None = None


@dataclass(slots=True)
class _ChatState:
    fingerprint: Fingerprint | None = None
    at: float = 0.0
    cached: int = 0
    message_id: str | None = None
    history: str | None = None
    recent: deque[tuple[int, int]] = field(default_factory=lambda: deque(maxlen=RECENT_CALLS))


def cause_of(previous: Fingerprint, current: Fingerprint, elapsed_s: float, history: str | None) -> CacheBreak:
    """Why `current` could not read what `previous` left cached `elapsed_s` seconds ago."""
    if elapsed_s > previous.ttl_s:
        return CacheBreak("ttl_expired")
    if previous.model != current.model:
        return CacheBreak("model_changed")
    if previous.tools != current.tools:
        return CacheBreak("tools_changed")
    matched = current.common_messages(previous)
    if history is not None and matched < previous.message_count:  # the history was rewritten here: say how
        return CacheBreak("messages_changed", reason=history, matched_messages=matched)
    if previous.system != current.system:
        return CacheBreak("system_changed", block=_first_changed_block(previous.system, current.system))
    if matched < previous.message_count:
        return CacheBreak("messages_changed", reason="edit", matched_messages=matched)
    return CacheBreak("unknown")


def _first_changed_block(before: tuple[tuple[str, bytes], ...], after: tuple[tuple[str, bytes], ...]) -> str:
    """The label of the first block that differs; where one was added or removed, that one's."""
    labels_after = {label for label, _ in after}
    for old, new in zip(before, after, strict=False):
        if old != new:
            return old[0] if old[0] != new[0] and old[0] not in labels_after else new[0]
    longer = after if len(after) > len(before) else before
    return longer[min(len(before), len(after))][0]


class CacheWatch:
    """Remembers, per chat (its session key), the previous watched call; judges each new one against it."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, chats: int = CHATS) -> None:
        self.clock = clock
        self.chats = chats
        self.breaks: Counter[str] = Counter()
        self._state: OrderedDict[str, _ChatState] = OrderedDict()
        self._known = PerChat(message_prints, MEMO_CHATS)

    def _get(self, chat: str, create: bool) -> _ChatState | None:
        state = self._state.get(chat)
        if state is None and create:
            state = self._state[chat] = _ChatState()
            while len(self._state) > self.chats:
                self._state.popitem(last=False)
        if state is not None:
            self._state.move_to_end(chat)
        return state

    @staticmethod
    def watched(request: LLMRequest) -> bool:
        return bool(request.chat) and request.purpose in WATCHED_PURPOSES

    def previous_message_id(self, request: LLMRequest) -> str | None:
        """The id of the chat's previous watched reply (for the vendor's cache diagnostics); None: none known."""
        state = self._state.get(request.chat) if self.watched(request) else None
        return state.message_id if state is not None else None

    def history_changed(self, op: str, key: object) -> None:
        """A SessionHistory observer: a compaction or restart is remembered as the reason for the next change; any
        change but an append drops what the chat's calls kept of its messages (`drop_chat`: a forget's redaction
        must leave none of the person's words in memory)."""
        if op != "append":
            drop_chat(str(key))
        reason = HISTORY_REASONS.get(op)
        state = self._get(str(key), create=False) if reason is not None else None
        if state is not None:
            state.history = reason

    def warm(self, chat: str) -> bool:
        """Whether the chat's previous call left something cached that is still within the cache's lifetime."""
        state = self._state.get(chat)
        if state is None or state.fingerprint is None or state.cached <= 0:
            return False
        return self.clock() - state.at <= state.fingerprint.ttl_s

    def hit_rate(self, chat: str) -> tuple[int, int] | None:
        """(tokens read from the cache, prompt tokens) over the chat's recent calls; None: no call seen."""
        state = self._state.get(chat)
        if state is None or not state.recent:
            return None
        return sum(r for r, _ in state.recent), sum(p for _, p in state.recent)

    def observe(self, request: LLMRequest, response: LLMResponse) -> CacheBreak | None:
        """Judge a successful call against the chat's previous one, then remember it; the break, if any."""
        if not self.watched(request):
            return None
        current, now, usage = Fingerprint.of(request, self._known(request.chat)), self.clock(), response.usage
        state = self._get(request.chat, create=True)
        assert state is not None
        found = None
        previous = state.fingerprint
        read = usage.cache_read_input_tokens
        if previous is not None and state.cached > 0 and read < state.cached * (1 - TOLERANCE):
            found = cause_of(previous, current, now - state.at, state.history)
            self._report(request, response, found, state, now)
        state.fingerprint, state.at, state.history = current, now, None
        state.cached = read + usage.cache_creation_input_tokens
        state.message_id = response.message_id or None
        state.recent.append((read, usage.prompt_tokens))
        return found

    def _report(
        self, request: LLMRequest, response: LLMResponse, found: CacheBreak, state: _ChatState, now: float
    ) -> None:
        self.breaks[found.cause] += 1
        fields: dict[str, Any] = {
            "cause": found.cause,
            "session_key": request.chat,
            "model": request.model,
            "expected_read": state.cached,
            "read": response.usage.cache_read_input_tokens,
            "written": response.usage.cache_creation_input_tokens,
            "idle_s": round(now - state.at, 1),
        }
        if found.block is not None:
            fields["block"] = found.block
        if found.reason is not None:
            fields["reason"] = found.reason
        if found.matched_messages is not None:
            fields["matched_messages"] = found.matched_messages
        if response.cache_miss_reason is not None:
            fields["cache_miss_reason"] = response.cache_miss_reason
        log.warning("prompt_cache_break", **fields)

    def metrics(self) -> list[str]:
        """Prometheus lines: `agenthub_prompt_cache_breaks_total{cause}`, every cause shown."""
        lines = [
            "# HELP agenthub_prompt_cache_breaks_total Model calls that read less from the prompt cache than the "
            "previous call of the same chat left there, by cause.",
            "# TYPE agenthub_prompt_cache_breaks_total counter",
        ]
        lines += [f'agenthub_prompt_cache_breaks_total{{cause="{c}"}} {self.breaks[c]}' for c in CAUSES]
        return lines
