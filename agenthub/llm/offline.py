"""`OfflineProvider`: a deterministic stand-in used when no API key is configured, so a fresh install runs."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

from agenthub import i18n
from agenthub.llm.calllog import CallLog
from agenthub.llm.tokens import estimate_text_tokens, estimate_tokens
from agenthub.llm.types import LLMRequest, LLMResponse, TextCallback
from agenthub.messages import Usage

ECHO_CHARS = 60

HOW_TO_CONFIGURE = (
    "To talk to a real model, set AGENTHUB_LLM__API_KEY (or ANTHROPIC_API_KEY) and, for an "
    "Anthropic-compatible vendor, llm.base_url or llm.preset (e.g. deepseek, moonshot, zhipu, qwen), then restart."
)


def last_user_text(messages: list[dict[str, Any]]) -> str:
    """The text of the last user message that has text ("" if none)."""
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        parts = [str(b.get("text", "")) for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]
        if parts:
            return "".join(parts)
    return ""


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= ECHO_CHARS else flat[: ECHO_CHARS - 1] + "…"


_TRAILING_CONTEXT = re.compile(r"\n\n\[[^\]\n]*\]\s*$")


def offline_reply(messages: list[dict[str, Any]], locale: str = "en", *, configured: bool = False) -> str:
    """The offline reply text for a conversation (the gateway's `[time, via channel]` tag is not echoed): in the
    chat's `locale` when it is `configured`, else in the language the user wrote in (else `locale`)."""
    said = _excerpt(_TRAILING_CONTEXT.sub("", last_user_text(messages)))
    if not configured:
        locale = i18n.written_in(said) or locale
    echo = i18n.text("llm.offline.echo", locale, said=said) if said else ""
    return i18n.text("llm.offline.reply", locale, echo=echo)


def _pieces(text: str) -> list[str]:
    """Split into word-boundary pieces of several words each, so callers see several deltas."""
    words = re.findall(r"\S+\s*", text)
    step = max(1, len(words) // 8)
    return ["".join(words[i : i + step]) for i in range(0, len(words), step)]


class OfflineProvider:
    """Streams a deterministic reply that says it is offline; never calls tools; knows every model name."""

    offline = True

    def __init__(
        self, *, name: str = "offline", default_model: str = "offline", call_log: CallLog | None = None
    ) -> None:
        self.name = name
        self.default_model = default_model
        self.call_log = call_log or CallLog()

    def knows_model(self, model: str) -> bool:
        return True

    async def warm_up(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    async def complete(self, request: LLMRequest) -> LLMResponse:
        return await self.stream(request, None)

    async def stream(self, request: LLMRequest, on_text: TextCallback | None = None) -> LLMResponse:
        began = time.perf_counter()
        text = offline_reply(request.messages, request.locale, configured=request.locale_configured)
        for piece in _pieces(text):
            await asyncio.sleep(0)
            if on_text is not None:
                on_text(piece)
        usage = Usage(
            input_tokens=estimate_tokens([request.system, request.messages, request.tools]),
            output_tokens=estimate_text_tokens(text),
        )
        response = LLMResponse(
            content=[{"type": "text", "text": text}],
            stop_reason="end_turn",
            usage=usage,
            model=request.model,
            usage_estimated=True,
        )
        self.call_log.record(self.name, request, response, time.perf_counter() - began)
        return response
