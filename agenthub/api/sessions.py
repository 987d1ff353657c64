"""Session routes: list, create, delete, rename, pin, auto-title, and a session's messages."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from aiohttp import web

from agenthub import i18n
from agenthub.agent.definition import AgentDefinition
from agenthub.api.errors import ApiError, refuses_storage_paths
from agenthub.api.host import ApiHost, ApiServices
from agenthub.api.llm_text import make_title
from agenthub.api.requests import (
    CHANNEL,
    CreateSessionBody,
    PinBody,
    RenameBody,
    agent_of,
    key_for,
    parse_body,
    sender_of,
    session_of,
    token_name,
)
from agenthub.errors import LLMError
from agenthub.jsonsafe import utf8_dumps
from agenthub.llm.types import CallOwner
from agenthub.media.names import chat_folders, remove_chat_folder
from agenthub.session_keys import SessionKey
from agenthub.storage.meta import SessionMeta


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=utf8_dumps)


def _meta(meta: SessionMeta) -> dict[str, Any]:
    return meta.to_json()


@refuses_storage_paths
async def list_sessions(api: ApiServices, request: web.Request) -> web.Response:
    gateway = api.host
    agent = agent_of(request, gateway)
    found = await gateway.history.list_sessions(agent.name, channel=CHANNEL)
    metas = sorted((m for _, m in found), key=lambda m: (not m.pinned, -m.updated_at))
    return _json({"sessions": [_meta(m) for m in metas]})


@refuses_storage_paths
async def create_session(api: ApiServices, request: web.Request) -> web.Response:
    gateway = api.host
    agent = agent_of(request, gateway)
    body = await parse_body(request, CreateSessionBody, optional=True)
    key = key_for(agent, body.chat_id or uuid.uuid4().hex[:12])
    if await gateway.history.session_exists(key):
        raise ApiError(409, "session_exists", f"session {key.chat_id!r} already exists")
    meta = await gateway.history.create(key, **({"title": body.title} if body.title else {}))
    return _json(_meta(meta), status=201)


@refuses_storage_paths
async def get_messages(api: ApiServices, request: web.Request) -> web.Response:
    gateway = api.host
    _, key = await session_of(request, gateway)
    return _json({"messages": await gateway.history.load(key)})


@refuses_storage_paths
async def delete_session(api: ApiServices, request: web.Request) -> web.Response:
    gateway = api.host
    agent, key = await session_of(request, gateway)
    if gateway.is_busy(key):
        raise ApiError(409, "session_busy", "the session is answering; try again when it is done")
    async with gateway.hold(key):  # no turn starts meanwhile, so no new background work either
        await gateway.cancel_background(key)  # a compaction or memory flush in flight must not write it back
        await _delete_own_memory(gateway, agent, key)  # first: a delete cut short still lists the session
        await gateway.history.delete(key)
        if api.scheduler is not None:  # a reminder must not bring a deleted session back
            await api.scheduler.delete_chat(key)
        await gateway.search.purge(agent.name, [key])  # not even in the index file's free pages
        for folder in chat_folders(gateway.settings.workspace_dir / agent.name, key):  # its inbox, large results
            await asyncio.to_thread(remove_chat_folder, folder)
        await api.inbox.inbox.drop_settled()  # the durable inbox kept the session's answered messages too
    return web.Response(status=204)


async def _delete_own_memory(gateway: ApiHost, agent: AgentDefinition, key: SessionKey) -> None:
    """The chat's own memory file and its backup, when the agent keeps one per chat (`scope = "chat"`); the
    agent-wide MEMORY.md is shared by every chat and stays."""
    files = gateway.memory_files
    own = files.memory_name(agent, key)
    if own != files.memory_name(agent):
        await files.writer.delete(own)


@refuses_storage_paths
async def rename_session(api: ApiServices, request: web.Request) -> web.Response:
    gateway = api.host
    _, key = await session_of(request, gateway)
    body = await parse_body(request, RenameBody)
    return _json(_meta(await gateway.history.update_meta(key, title=body.title.strip())))


@refuses_storage_paths
async def pin_session(api: ApiServices, request: web.Request) -> web.Response:
    gateway = api.host
    _, key = await session_of(request, gateway)
    body = await parse_body(request, PinBody)
    return _json(_meta(await gateway.history.update_meta(key, pinned=body.pinned)))


@refuses_storage_paths
async def auto_title(api: ApiServices, request: web.Request) -> web.Response:
    gateway = api.host
    agent, key = await session_of(request, gateway)
    history = await gateway.history.load(key)
    if not any(m.get("role") == "user" for m in history):
        raise ApiError(409, "session_empty", "the session has no messages to make a title from")
    try:
        owner = CallOwner(agent.name, key.channel, key.chat_id, sender_of(token_name(request)))
        title = await make_title(gateway, agent, history, owner)
    except LLMError as e:
        raise ApiError(502, "llm_error", e.user_text.render(i18n.locale_for(gateway.settings, "http", agent))) from None
    return _json(_meta(await gateway.history.update_meta(key, title=title)))
