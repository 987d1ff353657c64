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
    """What the call is for, in the `llm_call` log: turn, summary, flush, l3, title, welcome."""
    locale: str = "en"
    """The chat's locale, for the few texts a provider writes itself (the offline stand-in's reply); never sent."""
    locale_configured: bool = False
    """`locale` is set for the chat (agent.json or the channel's section): the offline reply keeps it, instead of
    following the language the user wrote in."""


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
