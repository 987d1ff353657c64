"""POST /api/agents/{agent}/chat: one message in, the reply as JSON or as an SSE stream."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from agenthub import i18n
from agenthub.api.codes import status_of
from agenthub.api.errors import ApiError
from agenthub.api.host import ApiServices
from agenthub.api.idempotency import IdempotentRequest, earlier_answer, idempotent_request, let_go, mark_stored
from agenthub.api.requests import (
    CHANNEL,
    ChatBody,
    agent_of,
    asked_locale,
    key_for,
    parse_body,
    sender_of,
    token_name,
)
from agenthub.api.sse import encode_event, joined_field, reply_text
from agenthub.channel.inbox_flow import HTTP_SOURCE
from agenthub.errors import StorageError
from agenthub.gateway.handle import ReplyHandle
from agenthub.jsonsafe import utf8_dumps
from agenthub.messages import (
    DeltaEvent,
    DoneEvent,
    ErrorCode,
    ErrorEvent,
    InboundMessage,
    NoticeEvent,
)

log = structlog.get_logger(__name__)


def wants_stream(request: web.Request) -> bool:
    if request.query.get("stream", "").lower() in ("1", "true", "yes"):
        return True
    return "text/event-stream" in request.headers.get("Accept", "")


async def handle_chat(api: ApiServices, request: web.Request) -> web.StreamResponse:
    """`POST /api/agents/{agent}/chat`: submit the message; stream its reply, or answer it as one JSON."""
    gateway = api.host
    agent = agent_of(request, gateway)
    body = await parse_body(request, ChatBody)
    key = key_for(agent, body.chat_id)
    idempotent = idempotent_request(request, token_name(request), agent.name, body)
    message = InboundMessage(
        channel=CHANNEL,
        chat_id=body.chat_id,
        sender_id=sender_of(token_name(request)),
        content=body.content,
        agent=agent.name,
        model_hint=body.model_hint,
        provider_hint=body.provider_hint,
        metadata={"chat_type": "private"},  # the console: one person's chats
    )
    asked = asked_locale(request)
    if asked is not None:  # followed where neither the agent nor [channels.http] sets a locale
        message.metadata["locale"] = asked
        if i18n.normalise_locale(request.query.get("lang")) == asked:  # chosen (the terminal chat), not the words
            message.metadata[i18n.LOCALE_CHOSEN] = True
    locale = i18n.locale_for(gateway.settings, CHANNEL, agent, asked)
    if idempotent is None:
        handle = await _submit(api, message, locale)
    else:  # a retry waits for the first request's answer; the first one runs the turn
        wait_s = 2 * (agent.config.lock_timeout_s or gateway.settings.session.lock_timeout_s)
        handle = await earlier_answer(api.idempotency, idempotent, wait_s=wait_s) or await _submit_keyed(
            api, idempotent, message, locale
        )
    if wants_stream(request):
        return await _stream(request, handle)
    collected = await _collect(handle)
    final = collected.final
    if isinstance(final, ErrorEvent):
        if not collected.text:
            raise ApiError(status_of(final.code), final.code, final.message)
        return _json(_incomplete(collected, final, str(key)), status_of(final.code))
    usage = final.usage.as_dict()
    reply = {"reply": reply_text(final), "session_key": str(key), "usage": usage, "notices": collected.notices}
    return _json({**reply, **joined_field(final)})


async def _submit(api: ApiServices, message: InboundMessage, locale: i18n.Locale) -> ReplyHandle:
    """Store the request in the inbox, then submit it: accepted, it is answered (into its session) also across a
    crash. Refused storage: 503 `storage_unavailable`, nothing run. While the daemon drains nothing is stored: a
    503 `shutdown` says so, and the client can send it again (one stored meanwhile is told its answer follows)."""
    if not api.inbox.gateway.accepting:
        restarting = i18n.text("abort.shutdown", locale)
        raise ApiError(status_of(ErrorCode.SHUTDOWN), ErrorCode.SHUTDOWN, restarting)
    try:
        return await api.inbox.submit(HTTP_SOURCE, message)
    except StorageError as e:
        log.warning("http_chat_not_stored", error=str(e))
        unavailable = i18n.text("error.storage_unavailable", locale)
        raise ApiError(status_of(ErrorCode.STORAGE_UNAVAILABLE), ErrorCode.STORAGE_UNAVAILABLE, unavailable) from None


async def _submit_keyed(
    api: ApiServices, idempotent: IdempotentRequest, message: InboundMessage, locale: i18n.Locale
) -> ReplyHandle:
    """`_submit` for the request that took an idempotency key: the key stays taken once the message is stored,
    and is let go when it was refused (a retry runs it)."""
    try:
        handle = await _submit(api, idempotent.tag(message), locale)
    except ApiError:  # refused before it was stored (draining, storage unavailable)
        await let_go(api.idempotency, idempotent)
        raise
    await mark_stored(api.idempotency, idempotent)
    return handle


@dataclass
class _Collected:
    """A reply gathered for a JSON answer: its terminal event, the text streamed before it, and its notices."""

    final: DoneEvent | ErrorEvent
    text: str
    notices: list[str]


async def _collect(handle: ReplyHandle) -> _Collected:
    """The terminal event, the deltas' text and the notices before it (fallbacks, compaction, queueing), read once
    the reply has ended: the deltas wait in the handle's buffer, nothing wakes this request for each of them."""
    notices: list[str] = []
    deltas: list[str] = []
    for event in await handle.collected():
        if isinstance(event, NoticeEvent):
            notices.append(event.text)
        elif isinstance(event, DeltaEvent):
            deltas.append(event.text)
        elif isinstance(event, DoneEvent | ErrorEvent):
            return _Collected(event, "".join(deltas), notices)
    return _Collected(await handle.result(), "".join(deltas), notices)


def _incomplete(collected: _Collected, error: ErrorEvent, session_key: str) -> dict[str, Any]:
    """A reply that broke after some text: the documented error shape plus the text that was produced."""
    return {
        "error": {"code": error.code, "message": error.message},
        "reply": collected.text,
        "incomplete": True,
        "session_key": session_key,
        "notices": collected.notices,
    }


def _json(data: dict[str, Any], status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=utf8_dumps)


async def _stream(request: web.Request, handle: ReplyHandle) -> web.StreamResponse:
    """Relay events as they come. A client that goes away stops the relay, never the turn: the reply is stored."""
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )
    await response.prepare(request)
    async for event in handle:
        try:
            await response.write(encode_event(event))
        except (ConnectionResetError, RuntimeError):
            log.info("sse_client_gone", session_key=handle.session_key)
            return response
    await response.write_eof()
    return response
