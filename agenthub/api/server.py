"""HttpApi: the core's HTTP API (bearer-token protected) and the web console, mounted on the daemon's server."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agenthub import i18n
from agenthub.api import agents, jobs, memory, sessions, usage
from agenthub.api.chat import handle_chat
from agenthub.api.errors import ApiError
from agenthub.api.host import ApiServices
from agenthub.api.llm_text import WelcomeCache
from agenthub.api.pushes import PushFeed, push_payload, stream_events
from agenthub.api.requests import CHANNEL, TOKEN_NAME, asked_locale
from agenthub.channel import Handler, WebRoutes
from agenthub.config.hints import problem
from agenthub.errors import ConfigError
from agenthub.invocation import command_name
from agenthub.messages import OutboundMessage
from agenthub.storage.ports import TokenCheck
from agenthub.storage.tokens import FileTokenCheck, TokenStore

log = structlog.get_logger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
CONSOLE_LANG = '<html lang="zh-CN">'
"""How index.html names its language; the page is served with the HTTP chats' locale in its place."""
STATIC_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"
"""The console's files are one flat directory; no name with a slash or a leading dot ever matches."""
ApiRoute = Callable[[ApiServices, web.Request], Awaitable[web.StreamResponse]]


class ApiConfig(BaseModel):
    """`[channels.http]`: the locale of HTTP chats and of the console. The server itself is `[http]`."""

    model_config = ConfigDict(extra="forbid")

    locale: str | None = Field(None, description="zh-CN or en for the texts the product writes to HTTP chats")

    @field_validator("locale")
    @classmethod
    def _known_locale(cls, value: str | None) -> str | None:
        if value is not None and i18n.normalise_locale(value) is None:
            raise ValueError('must be "zh-CN" or "en"')
        return value


def api_config(raw: Mapping[str, Any]) -> ApiConfig:
    """`[channels.http]` validated; a key it does not have (`port`, `enabled` …) stops start-up naming it."""
    try:
        return ApiConfig.model_validate(dict(raw))
    except ValidationError as e:
        items = e.errors(include_input=False, include_url=False)
        problems = "; ".join(
            f"channels.http.{'.'.join(map(str, item['loc']))}: {problem(ApiConfig, item)}" for item in items
        )
        stray = any(item["type"] == "extra_forbidden" for item in items)
        hint = " (the HTTP server's own keys are in [http])" if stray else ""
        raise ConfigError(f"invalid configuration: {problems}{hint}") from None


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


class HttpApi:
    """The `http` surface: its server is the daemon's; this class contributes the routes, and (as a Channel)
    delivers proactive messages to the sessions' open `/events` feeds."""

    name = CHANNEL

    def __init__(
        self, services: ApiServices, routes: WebRoutes, config: Mapping[str, Any], tokens: TokenCheck | None = None
    ) -> None:
        api_config(config)  # read by i18n.channel_locale; validated here so a stray key is never silently dropped
        self.services = services
        settings = services.host.settings
        self.tokens = tokens or FileTokenCheck(
            TokenStore(settings.auth_dir, [t.get_secret_value() for t in settings.http.tokens])
        )
        self.welcome = WelcomeCache(services.host)
        self.pushes = PushFeed()
        self._mount(routes)

    def _mount(self, routes: WebRoutes) -> None:
        api = "/api/agents"
        session = api + "/{agent}/sessions/{chat_id}"
        table: list[tuple[str, str, ApiRoute]] = [
            ("GET", "/api/agents", agents.list_agents),
            ("POST", api + "/{agent}/chat", handle_chat),
            ("GET", api + "/{agent}/sessions", sessions.list_sessions),
            ("POST", "/api/forget", memory.forget_person),
            ("POST", api + "/{agent}/sessions", sessions.create_session),
            ("GET", session + "/messages", sessions.get_messages),
            ("DELETE", session, sessions.delete_session),
            ("PATCH", session, sessions.rename_session),
            ("POST", session + "/pin", sessions.pin_session),
            ("POST", session + "/auto-title", sessions.auto_title),
            ("GET", session + "/context", memory.context_meter),
            ("POST", session + "/compact", memory.compact),
            ("GET", api + "/{agent}/welcome", self._welcome),
            ("GET", session + "/events", self._events),
            ("GET", api + "/{agent}/jobs", jobs.list_jobs),
            ("DELETE", api + "/{agent}/jobs/{job_id}", jobs.delete_job),
            ("GET", "/api/usage", usage.usage_report),
        ]
        for method, path, route in table:
            routes.add(method, path, self._authenticated(functools.partial(route, self.services)))
        routes.add("GET", "/", self._console)
        routes.routes.append(web.get("/favicon.ico", self._favicon))  # also HEAD, as web.get allows
        routes.routes.append(web.get("/static/{name:" + STATIC_NAME + "}", self._static))

    def _authenticated(self, handler: Handler) -> Handler:
        async def guarded(request: web.Request) -> web.StreamResponse:
            token = _bearer(request)
            name = await self.tokens.identify(token) if token is not None else None
            if name is None:
                raise ApiError(401, "unauthorized", "a valid 'Authorization: Bearer <token>' header is required")
            request[TOKEN_NAME] = name
            return await handler(request)

        return guarded

    async def _welcome(self, services: ApiServices, request: web.Request) -> web.Response:
        return await agents.welcome(services, self.welcome, request)

    async def _events(self, services: ApiServices, request: web.Request) -> web.StreamResponse:
        return await stream_events(request, services.host, self.pushes)

    async def _console(self, request: web.Request) -> web.Response:
        """The console page, its `<html lang>` set to the HTTP chats' locale (the console's texts follow it)."""
        page = await asyncio.to_thread((STATIC_DIR / "index.html").read_text, encoding="utf-8")
        asked = i18n.normalise_locale(request.query.get("lang"))  # the console's language switch wins
        locale = asked or i18n.channel_locale(self.services.host.settings, self.name, asked_locale(request))
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
        if not await self.tokens.has_tokens():
            log.warning("http_no_tokens", hint=f"create one with: {command_name()} token create --name console")

    async def stop(self) -> None:
        self.pushes.close()
        await self.services.inbox.aclose()  # the settles of chat replies that have ended

    async def send(self, message: OutboundMessage) -> None:
        """A proactive message (already stored in the session by its sender) goes to the session's open
        `/events` feeds; with none open, the console and the messages route still show it."""
        settings = self.services.host.settings
        agent = message.agent or settings.bindings.get(self.name) or settings.default_agent
        session = f"{agent}:{self.name}:{message.chat_id}"
        delivered = self.pushes.publish(agent, message.chat_id, push_payload(session, message.content))
        log.info("http_push", session_key=session, feeds=delivered)
