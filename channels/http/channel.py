"""HttpChannel: mounts the API (bearer-token protected) and the web console on the daemon's server."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from agenthub import i18n
from agenthub.channel import ChannelContext, Handler
from agenthub.errors import LLMError
from agenthub.gateway.core import GatewayCore
from agenthub.invocation import command_name
from agenthub.messages import ErrorCode, OutboundMessage
from agenthub.tokens import TokenStore
from channels.http import admin, jobs
from channels.http.chat import handle_chat
from channels.http.llm_text import WelcomeCache
from channels.http.pushes import PushFeed, push_payload, stream_events
from channels.http.requests import TOKEN_NAME, ApiError, agent_of

log = structlog.get_logger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
CONSOLE_LANG = '<html lang="zh-CN">'
"""How index.html names its language; the page is served with the HTTP channel's locale in its place."""
STATIC_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"
"""The console's files are one flat directory; no name with a slash or a leading dot ever matches."""


def _is_file(path: Path) -> bool:
    """Whether `path` is a regular file; a name the file system refuses (too long, …) is simply not one."""
    try:
        return path.is_file()
    except OSError:
        return False


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class HttpChannel:
    """The `http` channel. Its server is the daemon's; this class only contributes routes."""

    name = "http"

    def __init__(self, context: ChannelContext, config: Mapping[str, Any]) -> None:
        gateway = context.gateway
        if not isinstance(gateway, GatewayCore):
            raise TypeError("the http channel needs the GatewayCore itself (it serves session admin)")
        self.gateway = gateway
        settings = context.settings
        self.tokens = TokenStore(settings.auth_dir, [t.get_secret_value() for t in settings.http.tokens])
        self.welcome = WelcomeCache(gateway)
        self.pushes = PushFeed()
        self._mount(context)

    def _mount(self, context: ChannelContext) -> None:
        api = "/api/agents"
        session = api + "/{agent}/sessions/{chat_id}"
        table: list[tuple[str, str, Handler]] = [
            ("GET", "/api/agents", admin.list_agents),
            ("POST", api + "/{agent}/chat", handle_chat),
            ("GET", api + "/{agent}/sessions", admin.list_sessions),
            ("POST", "/api/forget", admin.forget_person),
            ("POST", api + "/{agent}/sessions", admin.create_session),
            ("GET", session + "/messages", admin.get_messages),
            ("DELETE", session, admin.delete_session),
            ("PATCH", session, admin.rename_session),
            ("POST", session + "/pin", admin.pin_session),
            ("POST", session + "/auto-title", admin.auto_title),
            ("GET", session + "/context", admin.context_meter),
            ("POST", session + "/compact", admin.compact),
            ("GET", api + "/{agent}/welcome", self._welcome),
            ("GET", session + "/events", self._events),
            ("GET", api + "/{agent}/jobs", jobs.list_jobs),
            ("DELETE", api + "/{agent}/jobs/{job_id}", jobs.delete_job),
        ]
        for method, path, handler in table:
            context.web.add(method, path, self._authenticated(handler))
        context.web.add("GET", "/", self._console)
        context.web.routes.append(web.get("/favicon.ico", self._favicon))  # also HEAD, as web.get allows
        context.web.routes.append(web.get("/static/{name:" + STATIC_NAME + "}", self._static))

    def _authenticated(self, handler: Handler) -> Handler:
        async def guarded(request: web.Request) -> web.StreamResponse:
            token = _bearer(request)
            name = self.tokens.identify(token) if token is not None else None
            if name is None:
                raise ApiError(401, "unauthorized", "a valid 'Authorization: Bearer <token>' header is required")
            request[TOKEN_NAME] = name
            return await handler(request)

        return guarded

    async def _welcome(self, request: web.Request) -> web.Response:
        agent = agent_of(request, self.gateway)
        try:
            entry = await self.welcome.get(agent)
        except LLMError as e:
            locale = i18n.locale_for(self.gateway.settings, "http", agent)
            raise ApiError(502, ErrorCode.LLM_ERROR, e.user_text.render(locale)) from None
        return web.json_response({"agent": agent.name, "text": entry["text"]})

    async def _events(self, request: web.Request) -> web.StreamResponse:
        return await stream_events(request, self.gateway, self.pushes)

    async def _console(self, request: web.Request) -> web.Response:
        """The console page, its `<html lang>` set to the HTTP channel's locale (the console's texts follow it)."""
        page = await asyncio.to_thread((STATIC_DIR / "index.html").read_text, encoding="utf-8")
        locale = i18n.channel_locale(self.gateway.settings, self.name)
        return web.Response(text=page.replace(CONSOLE_LANG, f'<html lang="{locale}">', 1), content_type="text/html")

    async def _favicon(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC_DIR / "favicon.svg")

    async def _static(self, request: web.Request) -> web.FileResponse:
        """A console file; a missing one is the JSON 404 every unknown route gives (FileResponse would send an
        empty body)."""
        path = STATIC_DIR / request.match_info["name"]
        if not await asyncio.to_thread(_is_file, path):
            raise ApiError(404, "not_found", "no such console file")
        return web.FileResponse(path)

    async def start(self) -> None:
        if not self.tokens.has_tokens():
            log.warning("http_no_tokens", hint=f"create one with: {command_name()} token create --name console")

    async def stop(self) -> None:
        self.pushes.close()

    async def send(self, message: OutboundMessage) -> None:
        """A proactive message (already stored in the session by its sender) goes to the session's open
        `/events` feeds; with none open, the console and the messages route still show it."""
        settings = self.gateway.settings
        agent = message.agent or settings.bindings.get(self.name) or settings.default_agent
        session = f"{agent}:{self.name}:{message.chat_id}"
        delivered = self.pushes.publish(agent, message.chat_id, push_payload(session, message.content))
        log.info("http_push", session_key=session, feeds=delivered)
