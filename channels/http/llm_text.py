"""Short LLM-made texts for the console: session titles and the agent's welcome (cached in welcome.json)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import structlog

from agenthub.agent.definition import AgentDefinition
from agenthub.gateway.core import GatewayCore
from agenthub.llm.types import LLMRequest
from agenthub.session.meta import TITLE_CHARS, text_of, title_from
from agenthub.storage.atomic import atomic_write_text

log = structlog.get_logger(__name__)

TITLE_PROMPT = (
    "Give this conversation a short title (at most 12 words, no quotes, no trailing punctuation), "
    "in the language the user writes in. Answer with the title only."
)
WELCOME_PROMPT = (
    "Write the short welcome message (2-3 sentences) a new user sees before their first message: "
    "who you are and what you can help with. Answer with the message only."
)


def _transcript(history: list[dict[str, Any]], limit: int = 8) -> str:
    lines = []
    for message in history[:limit]:
        if message.get("role") in ("user", "assistant"):
            text = text_of(message.get("content"))[:500]
            if text:
                lines.append(f"{message['role']}: {text}")
    return "\n".join(lines)


async def make_title(gateway: GatewayCore, agent: AgentDefinition, history: list[dict[str, Any]]) -> str:
    provider, model, _ = gateway.providers.resolve(None, None, agent.config.provider, agent.config.model)
    request = LLMRequest(
        model=model,
        system=[{"type": "text", "text": TITLE_PROMPT}],
        messages=[{"role": "user", "content": _transcript(history)}],
        tools=[],
        max_tokens=64,
    )
    response = await provider.complete(request)
    title = title_from(response.text.strip().strip("\"'“”「」"))
    if provider.offline or not response.text.strip():
        first_user = next((text_of(m.get("content")) for m in history if m.get("role") == "user"), "")
        title = title_from(first_user)
    return title[:TITLE_CHARS]


def _persona_hash(agent: AgentDefinition) -> str:
    return hashlib.sha256(agent.persona.encode("utf-8")).hexdigest()[:16]


def _read_cache(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class WelcomeCache:
    """One welcome per agent, remade when the persona changes; stored in `agents/<name>/welcome.json`."""

    def __init__(self, gateway: GatewayCore) -> None:
        self.gateway = gateway
        self._memory: dict[str, dict[str, Any]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def get(self, agent: AgentDefinition) -> dict[str, Any]:
        async with self._locks.setdefault(agent.name, asyncio.Lock()):
            path = agent.directory / "welcome.json" if agent.directory is not None else None
            cached = self._memory.get(agent.name) or (await asyncio.to_thread(_read_cache, path) if path else None)
            if cached is not None and cached.get("persona") == _persona_hash(agent) and cached.get("text"):
                self._memory[agent.name] = cached
                return cached
            entry = {
                "text": await self._generate(agent),
                "persona": _persona_hash(agent),
                "created_at": int(time.time()),
            }
            if path is not None and not self.gateway.providers.is_offline:
                await asyncio.to_thread(atomic_write_text, path, json.dumps(entry, ensure_ascii=False, indent=2))
            self._memory[agent.name] = entry
            return entry

    async def _generate(self, agent: AgentDefinition) -> str:
        provider, model, _ = self.gateway.providers.resolve(None, None, agent.config.provider, agent.config.model)
        request = LLMRequest(
            model=model,
            system=[{"type": "text", "text": agent.persona}],
            messages=[{"role": "user", "content": WELCOME_PROMPT}],
            tools=[],
            max_tokens=300,
        )
        response = await provider.complete(request)
        return response.text.strip() or f"Hi, I'm {agent.name}. How can I help?"
