"""Agent routes: the loaded agents, and an agent's welcome for a new session."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from agenthub import i18n
from agenthub.api.errors import ApiError
from agenthub.api.host import ApiServices
from agenthub.api.llm_text import WelcomeCache
from agenthub.api.requests import agent_of
from agenthub.errors import LLMError
from agenthub.jsonsafe import utf8_dumps
from agenthub.messages import ErrorCode


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=utf8_dumps)


async def list_agents(api: ApiServices, request: web.Request) -> web.Response:
    gateway = api.host
    agents = [
        {"name": a.name, "description": a.config.description, "model": a.config.model or gateway.settings.llm.model}
        for a in (gateway.agents.get(n) for n in gateway.agents.names())
    ]
    return _json({"agents": agents, "offline": gateway.providers.is_offline})


async def welcome(api: ApiServices, cache: WelcomeCache, request: web.Request) -> web.Response:
    """`GET /api/agents/{agent}/welcome`: the LLM-made welcome, cached per persona."""
    agent = agent_of(request, api.host)
    try:
        entry = await cache.get(agent)
    except LLMError as e:
        locale = i18n.locale_for(api.host.settings, "http", agent)
        raise ApiError(502, ErrorCode.LLM_ERROR, e.user_text.render(locale)) from None
    return _json({"agent": agent.name, "text": entry["text"]})
