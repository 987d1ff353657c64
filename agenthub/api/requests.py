"""Request parsing for the HTTP API: JSON bodies validated by pydantic, ids through the key factory."""

from __future__ import annotations

import hashlib
from typing import TypeVar

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from agenthub import i18n, jsonsafe
from agenthub.agent.definition import AgentDefinition
from agenthub.api.errors import ApiError
from agenthub.api.host import ApiHost
from agenthub.errors import AgentNotFoundError, InvalidIdError
from agenthub.session_keys import SessionKey, session_key, validate_agent_name, validate_part

CHANNEL = "http"
Body = TypeVar("Body", bound=BaseModel)
TOKEN_NAME = web.RequestKey("agenthub.token_name", str)
"""The name of the token that authenticated the request (`TokenStore.identify`), set by the auth guard."""
SENDER_MAX_BYTES = 64


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


class ChatBody(_Body):
    chat_id: str = Field(min_length=1, max_length=128)
    content: str = Field(min_length=1, max_length=100_000)
    model_hint: str | None = Field(None, max_length=200)
    provider_hint: str | None = Field(None, max_length=100)


class CreateSessionBody(_Body):
    chat_id: str | None = Field(None, min_length=1, max_length=128)
    title: str | None = Field(None, min_length=1, max_length=200)


class RenameBody(_Body):
    title: str = Field(min_length=1, max_length=200)


class CompactBody(_Body):
    focus: str = Field("", max_length=2000)
    """What the summary should keep, as `/compact <focus>` in a chat."""


class PinBody(_Body):
    pinned: StrictBool  # "yes", 1 or "true" are not booleans: 422, never a guess


def token_name(request: web.Request) -> str:
    """Who is calling: the authenticating token's name (routes without the auth guard never get here)."""
    try:
        return request[TOKEN_NAME]
    except KeyError:
        raise RuntimeError("token_name() on a request the auth guard did not see") from None


def asked_locale(request: web.Request) -> i18n.Locale | None:
    """The locale the caller asked for: `?lang=`, else its `Accept-Language` (used where none is configured)."""
    return i18n.normalise_locale(request.query.get("lang")) or i18n.accept_language(
        request.headers.get("Accept-Language")
    )


def sender_of(name: str) -> str:
    """The sender id for a token name. Sender ids name per-user memory files, so a name the key rules refuse
    (`a/b`, `..`) or a very long one becomes a stable `token-<hash>` instead of failing every turn."""
    try:
        validate_part("sender_id", name, allow_colon=True)
    except InvalidIdError:
        pass
    else:
        if len(name.encode("utf-8")) <= SENDER_MAX_BYTES:
            return name
    return "token-" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:12]


async def parse_body(request: web.Request, model: type[Body], *, optional: bool = False) -> Body:
    """The request's JSON body as `model`: 400 when it is not JSON (or nested too deep to parse), 422 naming the
    first bad field."""
    raw = await request.read()
    if not raw.strip() and optional:
        return model()
    try:
        data = jsonsafe.loads(raw)
    except ValueError:  # jsonsafe: also a text nested deeper than the parser goes (`[` × 100,000)
        raise ApiError(400, "invalid_json", "the request body is not valid JSON") from None
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors(include_input=False, include_url=False)[0]
        field = ".".join(str(p) for p in first["loc"]) or "body"
        raise ApiError(422, "validation_error", f"{field}: {first['msg']}") from None


def agent_of(request: web.Request, host: ApiHost) -> AgentDefinition:
    """The `{agent}` path parameter as a loaded agent: 400 if it is not a valid id, 404 if unknown."""
    name = request.match_info["agent"]
    try:
        validate_agent_name(name)
        return host.agents.get(name)
    except InvalidIdError as e:
        raise ApiError(400, "invalid_id", str(e)) from None
    except AgentNotFoundError:
        raise ApiError(404, "agent_not_found", f"no agent named {name!r}") from None


def key_for(agent: AgentDefinition, chat_id: str) -> SessionKey:
    try:
        return session_key(agent.name, CHANNEL, chat_id)
    except InvalidIdError as e:
        raise ApiError(400, "invalid_id", str(e)) from None


async def session_of(
    request: web.Request, host: ApiHost, *, must_exist: bool = True
) -> tuple[AgentDefinition, SessionKey]:
    """The `{agent}` and `{chat_id}` path parameters as a key; 404 when the session does not exist."""
    agent = agent_of(request, host)
    key = key_for(agent, request.match_info["chat_id"])
    if must_exist and not await host.history.session_exists(key):
        raise ApiError(404, "session_not_found", f"no session {key.chat_id!r} for agent {agent.name!r}")
    return agent, key
