"""Short LLM-made texts for the console: session titles and the agent's welcome (cached in welcome.json)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import structlog

from agenthub import i18n
from agenthub.agent.definition import AgentDefinition
from agenthub.api.host import ApiHost
from agenthub.llm.types import CallOwner, LLMProvider, LLMRequest
from agenthub.storage.atomic import atomic_write_text
from agenthub.storage.meta import TITLE_CHARS, text_of, title_from

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


async def make_title(
    gateway: ApiHost, agent: AgentDefinition, history: list[dict[str, Any]], owner: CallOwner | None = None
) -> str:
    provider, model, _ = gateway.providers.resolve(None, None, agent.config.provider, agent.config.model)
    request = LLMRequest(
        model=model,
        system=[{"type": "text", "text": TITLE_PROMPT}],
        messages=[{"role": "user", "content": _transcript(history)}],
        tools=[],
        max_tokens=64,
        purpose="title",
        owner=owner or CallOwner(agent.name, "http"),
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


def offline_welcome(agent: AgentDefinition, locale: str) -> str:
    """The welcome when no model is configured: fixed and honest, never the offline echo of WELCOME_PROMPT."""
    about = agent.config.description.strip()
    key = "http.offline_welcome.about" if about else "http.offline_welcome"
    return i18n.text(key, locale, agent=agent.name, about=about)


class WelcomeCache:
    """One welcome per agent, remade when the persona changes; stored in `agents/<name>/welcome.json`, or only
    in memory when that file cannot be written (a read-only agents dir under systemd's ProtectSystem=strict)."""

    def __init__(self, gateway: ApiHost) -> None:
        self.gateway = gateway
        self._memory: dict[str, dict[str, Any]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._unwritable: set[str] = set()

    async def get(self, agent: AgentDefinition) -> dict[str, Any]:
        provider, model, _ = self.gateway.providers.resolve(None, None, agent.config.provider, agent.config.model)
        if provider.offline:
            welcome = offline_welcome(agent, i18n.locale_for(self.gateway.settings, "http", agent))
            return {"text": welcome, "persona": _persona_hash(agent), "created_at": int(time.time())}
        async with self._locks.setdefault(agent.name, asyncio.Lock()):
            path = agent.directory / "welcome.json" if agent.directory is not None else None
            cached = self._memory.get(agent.name) or (await asyncio.to_thread(_read_cache, path) if path else None)
            if cached is not None and cached.get("persona") == _persona_hash(agent) and cached.get("text"):
                self._memory[agent.name] = cached
                return cached
            entry = {
                "text": await self._generate(agent, provider, model),
                "persona": _persona_hash(agent),
                "created_at": int(time.time()),
            }
            self._memory[agent.name] = entry
            if path is not None:
                await self._store(agent.name, path, entry)
            return entry

    async def _store(self, name: str, path: Path, entry: dict[str, Any]) -> None:
        """Write welcome.json; a failure leaves the welcome in memory only and is logged once per agent."""
        try:
            await asyncio.to_thread(atomic_write_text, path, json.dumps(entry, ensure_ascii=False, indent=2))
        except OSError as e:
            if name not in self._unwritable:
                self._unwritable.add(name)
                log.warning("welcome_cache_not_writable", agent=name, path=str(path), error=str(e))

    async def _generate(self, agent: AgentDefinition, provider: LLMProvider, model: str) -> str:
        request = LLMRequest(
            model=model,
            system=[{"type": "text", "text": agent.persona}],
            messages=[{"role": "user", "content": WELCOME_PROMPT}],
            tools=[],
            max_tokens=300,
            purpose="welcome",
            owner=CallOwner(agent.name, "http"),
        )
        response = await provider.complete(request)
        return response.text.strip() or f"Hi, I'm {agent.name}. How can I help?"
