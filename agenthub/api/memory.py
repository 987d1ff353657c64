"""Memory routes: a session's context meter, its compaction, and "forget me" for one person in every chat."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from agenthub import i18n
from agenthub.api.errors import ApiError, refuses_storage_paths
from agenthub.api.host import ApiServices
from agenthub.api.requests import CHANNEL, CompactBody, asked_locale, parse_body, session_of, token_name
from agenthub.channel.registry import unknown_channel
from agenthub.errors import AgentNotFoundError, InvalidIdError, SessionBusyError
from agenthub.forget.redact import Person
from agenthub.jsonsafe import utf8_dumps
from agenthub.llm.tokens import estimate_tokens
from agenthub.session_keys import validate_agent_name, validate_part, validate_sender


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=utf8_dumps)


@refuses_storage_paths
async def context_meter(api: ApiServices, request: web.Request) -> web.Response:
    gateway = api.host
    agent, key = await session_of(request, gateway)
    history = await gateway.history.load(key)
    meta = await gateway.history.get_meta(key)
    return _json(
        {
            "messages": len(history),
            "estimated_tokens": estimate_tokens([m.get("content") for m in history]),
            "last_usage": meta.last_usage if meta is not None else None,
            "has_summary": any(m.get("role") == "system" for m in history),
            "busy": gateway.is_busy(key),
            "thresholds": api.thresholds(agent),
        }
    )


@refuses_storage_paths
async def compact(api: ApiServices, request: web.Request) -> web.Response:
    gateway = api.host
    agent, key = await session_of(request, gateway)
    if api.compactor is None:
        raise ApiError(501, "not_available", "compaction is not available")
    body = await parse_body(request, CompactBody, optional=True)
    before = len(await gateway.history.load(key))
    actor = f"http:{token_name(request)}"
    try:
        locale = i18n.locale_for(gateway.settings, CHANNEL, agent, asked_locale(request))
        result = await api.compactor.compact(key, agent, reason="manual", actor=actor, focus=body.focus, locale=locale)
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
async def forget_person(api: ApiServices, request: web.Request) -> web.Response:
    """`POST /api/forget` `{"channel", "sender_id", "agent"?}`: everything about that person in every chat of the
    agent (all agents when omitted), each session redacted under its serialisation; answers the counts."""
    gateway = api.host
    body = await parse_body(request, ForgetBody)
    try:
        person = Person(validate_part("channel", body.channel), validate_sender(body.sender_id))
        agents = (
            [gateway.agents.get(validate_agent_name(body.agent))]
            if body.agent
            else [gateway.agents.get(name) for name in gateway.agents.names()]
        )
    except InvalidIdError as e:
        raise ApiError(400, "invalid_id", str(e)) from None
    except AgentNotFoundError:
        raise ApiError(404, "agent_not_found", f"no agent named {body.agent!r}") from None
    if (unknown := unknown_channel(person.channel)) is not None:  # a typo would forget nobody and answer 200
        raise ApiError(400, "unknown_channel", unknown)
    report = await api.forgetter().forget_everywhere(agents, person, actor=f"http:{token_name(request)}")
    return _json({"forgotten": report.as_dict()})
