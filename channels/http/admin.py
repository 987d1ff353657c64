"""Session admin routes: list, create, delete, rename, pin, auto-title, messages, context meter, compaction, and
"forget me" for one person in every chat."""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from agenthub import i18n
from agenthub.agent.definition import AgentDefinition
from agenthub.errors import (
    AgentNotFoundError,
    InvalidIdError,
    LLMError,
    PathRefusedError,
    SessionBusyError,
    StorageError,
)
from agenthub.forget.command import gateway_forgetter
from agenthub.forget.redact import Person
from agenthub.gateway.core import GatewayCore
from agenthub.llm.tokens import estimate_tokens
from agenthub.media.names import chat_folders, remove_chat_folder
from agenthub.memory.files import backup_path
from agenthub.memory.thresholds import thresholds_for
from agenthub.storage.keys import SessionKey, validate_agent_name, validate_part
from agenthub.storage.meta import SessionMeta
from agenthub.web import GATEWAY
from channels.http.llm_text import make_title
from channels.http.requests import (
    CHANNEL,
    ApiError,
    CompactBody,
    CreateSessionBody,
    PinBody,
    RenameBody,
    agent_of,
    key_for,
    parse_body,
    session_of,
    token_name,
)

log = structlog.get_logger(__name__)

Route = Callable[[web.Request], Awaitable[web.Response]]
PATH_REFUSED = "this session's files are refused by the storage checks (a link inside data/); see the daemon log"
STORAGE_UNAVAILABLE = "the change could not be saved (the server's storage is full or not writable); try again later"


def refuses_storage_paths(handler: Route) -> Route:
    """Storage errors in the documented error shape, for this request only: a refused path (a symbolic link
    planted inside data/) is a 403, a write the disk refused (full, read-only) a 503. The log names the route;
    the message never carries the path or the exception."""

    @functools.wraps(handler)
    async def route(request: web.Request) -> web.Response:
        try:
            return await handler(request)
        except PathRefusedError:
            log.warning("storage_path_refused", path=request.path)
            raise ApiError(403, "path_refused", PATH_REFUSED) from None
        except StorageError as e:
            log.warning("storage_write_failed", path=request.path, error=repr(e.__cause__))
            raise ApiError(503, "storage_unavailable", STORAGE_UNAVAILABLE) from None

    return route


def _gateway(request: web.Request) -> GatewayCore:
    return request.app[GATEWAY]


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, ensure_ascii=False))


def _meta(meta: SessionMeta) -> dict[str, Any]:
    return meta.to_json()


async def list_agents(request: web.Request) -> web.Response:
    gateway = _gateway(request)
    agents = [
        {"name": a.name, "description": a.config.description, "model": a.config.model or gateway.settings.llm.model}
        for a in (gateway.agents.get(n) for n in gateway.agents.names())
    ]
    return _json({"agents": agents, "offline": gateway.providers.is_offline})


@refuses_storage_paths
async def list_sessions(request: web.Request) -> web.Response:
    gateway = _gateway(request)
    agent = agent_of(request, gateway)
    found = await gateway.history.list_sessions(agent.name, channel=CHANNEL)
    metas = sorted((m for _, m in found), key=lambda m: (not m.pinned, -m.updated_at))
    return _json({"sessions": [_meta(m) for m in metas]})


@refuses_storage_paths
async def create_session(request: web.Request) -> web.Response:
    gateway = _gateway(request)
    agent = agent_of(request, gateway)
    body = await parse_body(request, CreateSessionBody, optional=True)
    key = key_for(agent, body.chat_id or uuid.uuid4().hex[:12])
    if gateway.history.exists(key):
        raise ApiError(409, "session_exists", f"session {key.chat_id!r} already exists")
    meta = await gateway.history.create(key, **({"title": body.title} if body.title else {}))
    return _json(_meta(meta), status=201)


@refuses_storage_paths
async def get_messages(request: web.Request) -> web.Response:
    gateway = _gateway(request)
    _, key = session_of(request, gateway)
    return _json({"messages": await gateway.history.load(key)})


@refuses_storage_paths
async def delete_session(request: web.Request) -> web.Response:
    gateway = _gateway(request)
    agent, key = session_of(request, gateway)
    if gateway.is_busy(key):
        raise ApiError(409, "session_busy", "the session is answering; try again when it is done")
    async with gateway.hold(key):  # no turn starts meanwhile, so no new background work either
        await gateway.cancel_background(key)  # a compaction or memory flush in flight must not write it back
        await gateway.history.delete(key, also=_own_memory_files(gateway, agent, key))
        if gateway.scheduler is not None:  # a reminder must not bring a deleted session back
            await gateway.scheduler.delete_chat(key)
        await gateway.search.purge(agent.name, [key])  # not even in the index file's free pages
        for folder in chat_folders(gateway.settings.workspace_dir / agent.name, key):  # its inbox, large results
            await asyncio.to_thread(remove_chat_folder, folder)
    return web.Response(status=204)


def _own_memory_files(gateway: GatewayCore, agent: AgentDefinition, key: SessionKey) -> list[Path]:
    """The chat's own memory file and its backup, when the agent keeps one per chat (`scope = "chat"`); the
    agent-wide MEMORY.md is shared by every chat and stays."""
    own = gateway.memory_files.memory_path(agent, key)
    if own == gateway.memory_files.memory_path(agent):
        return []
    return [own, backup_path(own)]


@refuses_storage_paths
async def rename_session(request: web.Request) -> web.Response:
    gateway = _gateway(request)
    _, key = session_of(request, gateway)
    body = await parse_body(request, RenameBody)
    return _json(_meta(await gateway.history.update_meta(key, title=body.title.strip())))


@refuses_storage_paths
async def pin_session(request: web.Request) -> web.Response:
    gateway = _gateway(request)
    _, key = session_of(request, gateway)
    body = await parse_body(request, PinBody)
    return _json(_meta(await gateway.history.update_meta(key, pinned=body.pinned)))


@refuses_storage_paths
async def auto_title(request: web.Request) -> web.Response:
    gateway = _gateway(request)
    agent, key = session_of(request, gateway)
    history = await gateway.history.load(key)
    if not any(m.get("role") == "user" for m in history):
        raise ApiError(409, "session_empty", "the session has no messages to make a title from")
    try:
        title = await make_title(gateway, agent, history)
    except LLMError as e:
        raise ApiError(502, "llm_error", e.user_text.render(i18n.locale_for(gateway.settings, "http", agent))) from None
    return _json(_meta(await gateway.history.update_meta(key, title=title)))


@refuses_storage_paths
async def context_meter(request: web.Request) -> web.Response:
    gateway = _gateway(request)
    agent, key = session_of(request, gateway)
    history = await gateway.history.load(key)
    meta = await gateway.history.get_meta(key)
    return _json(
        {
            "messages": len(history),
            "estimated_tokens": estimate_tokens([m.get("content") for m in history]),
            "last_usage": meta.last_usage if meta is not None else None,
            "has_summary": any(m.get("role") == "system" for m in history),
            "busy": gateway.is_busy(key),
            "thresholds": thresholds_for(gateway.settings, agent),
        }
    )


@refuses_storage_paths
async def compact(request: web.Request) -> web.Response:
    gateway = _gateway(request)
    agent, key = session_of(request, gateway)
    if gateway.compactor is None:
        raise ApiError(501, "not_available", "compaction is not available")
    body = await parse_body(request, CompactBody, optional=True)
    before = len(await gateway.history.load(key))
    actor = f"http:{token_name(request)}"
    try:
        result = await gateway.compactor.compact(key, agent, reason="manual", actor=actor, focus=body.focus)
    except SessionBusyError:
        raise ApiError(409, "session_busy", "the session is answering; try again when it is done") from None
    after = len(await gateway.history.load(key))
    return _json({"result": result, "messages_before": before, "messages_after": after})


class ForgetBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    channel: str = Field(min_length=1, max_length=128)
    sender_id: str = Field(min_length=1, max_length=128)
    agent: str | None = Field(None, min_length=1, max_length=128)


@refuses_storage_paths
async def forget_person(request: web.Request) -> web.Response:
    """`POST /api/forget` `{"channel", "sender_id", "agent"?}`: everything about that person in every chat of the
    agent (all agents when omitted), each session redacted under its serialisation; answers the counts."""
    gateway = _gateway(request)
    body = await parse_body(request, ForgetBody)
    try:
        person = Person(
            validate_part("channel", body.channel), validate_part("sender_id", body.sender_id, allow_colon=True)
        )
        agents = (
            [gateway.agents.get(validate_agent_name(body.agent))]
            if body.agent
            else [gateway.agents.get(name) for name in gateway.agents.names()]
        )
    except InvalidIdError as e:
        raise ApiError(400, "invalid_id", str(e)) from None
    except AgentNotFoundError:
        raise ApiError(404, "agent_not_found", f"no agent named {body.agent!r}") from None
    report = await gateway_forgetter(gateway).forget_everywhere(agents, person, actor=f"http:{token_name(request)}")
    return _json({"forgotten": report.as_dict()})
