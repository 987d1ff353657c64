"""The provider-neutral request/response types and the `LLMProvider` protocol the agent loop codes against."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agenthub.messages import Usage

Sleep = Callable[[float], Awaitable[None]]
"""An injectable `asyncio.sleep` (tests record backoff delays instead of waiting)."""

TextCallback = Callable[[str], None]
"""Called with each text delta as it streams."""


@dataclass(frozen=True, slots=True)
class CallOwner:
    """Who a model call is made for, in the usage records (design §15): the agent, and the chat and sender when
    the call serves one (empty for an agent's background work such as L3)."""

    agent: str
    channel: str = ""
    chat_id: str = ""
    sender_id: str = ""
    senders: tuple[str, ...] = ()
    """A turn that joined several senders' messages: all of them (the usage is split among them); else empty."""


@dataclass(frozen=True)
class LLMRequest:
    """One Messages API call; `system`, `messages` and `tools` are Anthropic-shaped plain dicts."""

    model: str
    system: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    max_tokens: int
    tool_choice: dict[str, Any] | None = None
    purpose: str = "other"
    """What the call is for, in the `llm_call` log and the usage records: turn, job, summary, flush, l3, title,
    welcome."""
    owner: CallOwner | None = None
    """Who the call is for (usage records); None: unknown (counted under no agent)."""
    locale: str = "en"
    """The chat's locale, for the few texts a provider writes itself (the offline stand-in's reply); never sent."""
    chat: str = ""
    """The session key of the chat the call is for ("": none); the prompt-cache watch compares a chat's calls."""
    locale_configured: bool = False
    """`locale` is set for the chat (agent.json or the channel's section): the offline reply keeps it, instead of
    following the language the user wrote in."""
    first_call_tail: int = 0
    """How many blocks at the end of the newest message only the turn's first call carries (recalled memory): a tool
    step's later calls leave them out, so the prefix they cache is the one the stored history repeats next turn."""


@dataclass(frozen=True)
class LLMResponse:
    """The final reply of one call.

    `stop_reason` is None when the stream was cut before `message_stop` (treat the reply as truncated);
    `usage` is final (the stream's `message_delta` values overwrite `message_start`'s).
    """

    content: list[dict[str, Any]]
    stop_reason: str | None
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    message_id: str = ""
    """The vendor's id of the reply (`msg_…`), "" when it gave none."""
    cache_miss_reason: dict[str, Any] | None = None
    """Anthropic's `diagnostics.cache_miss_reason` when the request asked for cache diagnostics and it found one."""
    usage_estimated: bool = False
    """True when `usage` is our estimate, not the vendor's report (the offline stand-in)."""

    @property
    def text(self) -> str:
        """All text blocks, concatenated."""
        return "".join(str(b.get("text", "")) for b in self.content if b.get("type") == "text")

    @property
    def tool_uses(self) -> list[dict[str, Any]]:
        """The `tool_use` blocks, in order."""
        return [b for b in self.content if b.get("type") == "tool_use"]


class LLMProvider(Protocol):
    """A model endpoint. Failures raise `agenthub.errors.LLMError` (retries already done); cancellation
    propagates and closes the connection."""

    name: str
    default_model: str
    offline: bool

    async def stream(self, request: LLMRequest, on_text: TextCallback | None = None) -> LLMResponse:
        """Run one call, passing each text delta to `on_text`; return the final response."""
        ...

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Run one call without streaming callbacks (summaries, titles)."""
        ...

    async def warm_up(self) -> None:
        """Load what the first call needs (the SDK, the client) ahead of it; nothing for a provider without."""
        ...

    async def aclose(self) -> None:
        """Release the client and its connections."""
        ...

    def knows_model(self, model: str) -> bool:
        """False when `model` is clearly unusable as a model name for this provider."""
        ...
