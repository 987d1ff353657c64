"""`Idempotency-Key` on chat requests (design §12): the first request with a key runs the turn; a retry with the same
key and body (through any instance) waits for that turn and gets its answer, never a second turn; the same key
with another body is a 422. Keys are scoped per token, agent and chat, and kept `http.idempotency_window_s`."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from agenthub.api.errors import ApiError
from agenthub.api.requests import ChatBody
from agenthub.errors import StorageError
from agenthub.gateway.handle import ReplyHandle
from agenthub.messages import DeltaEvent, DoneEvent, ErrorEvent, InboundMessage, Usage
from agenthub.storage.ports import IdempotencyStore

log = structlog.get_logger(__name__)

HEADER = "Idempotency-Key"
METADATA = "idempotency"
"""The message metadata (kept in its inbox entry, so a resumed turn records its answer too): `{"scope", "key"}`."""
_KEY = re.compile(r"[\x21-\x7e]{1,255}")
"""Printable ASCII without spaces, 1–255 characters (a UUID fits)."""
JOIN_POLL_S = 0.2

AnswerHook = Callable[[InboundMessage, DoneEvent | ErrorEvent], Awaitable[None]]


@dataclass(frozen=True)
class IdempotentRequest:
    """A chat request carrying a key: its scope (token, agent, chat), the key, and a digest of what it asks."""

    scope: str
    key: str
    fingerprint: str

    def tag(self, message: InboundMessage) -> InboundMessage:
        """`message` carrying the key, so that whoever answers it (also after a restart) keeps the answer."""
        marked = {**message.metadata, METADATA: {"scope": self.scope, "key": self.key}}
        return dataclasses.replace(message, metadata=marked)


def idempotent_request(request: web.Request, token: str, agent: str, body: ChatBody) -> IdempotentRequest | None:
    """The request's key (None without the header); a malformed one is a 400 `invalid_idempotency_key`."""
    raw = request.headers.get(HEADER)
    if raw is None:
        return None
    if not _KEY.fullmatch(raw):
        raise ApiError(400, "invalid_idempotency_key", f"{HEADER} must be 1-255 printable ASCII characters")
    asked = {"content": body.content, "model_hint": body.model_hint, "provider_hint": body.provider_hint}
    fingerprint = hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()
    return IdempotentRequest(json.dumps([token, agent, body.chat_id]), raw, fingerprint)


async def earlier_answer(store: IdempotencyStore, req: IdempotentRequest, *, wait_s: float) -> ReplyHandle | None:
    """None when this request took the key (it runs the turn); else a handle ending with the answer of the request
    that has it, once there is one (waiting up to `wait_s`: then a 409 `idempotency_key_in_progress`). The key
    with another body: 422 `idempotency_key_reused`."""
    deadline = time.monotonic() + wait_s
    while True:
        record = await store.claim(req.scope, req.key, req.fingerprint)  # taken again if the first one let it go
        if record is None:
            return None
        if record.fingerprint != req.fingerprint:
            raise ApiError(422, "idempotency_key_reused", f"this {HEADER} was used for a different request")
        if record.final is not None:
            log.info("idempotent_retry_answered", joined_running=False)
            return _ended_with(final_from_json(record.final))
        if time.monotonic() >= deadline:
            raise ApiError(409, "idempotency_key_in_progress", f"the request with this {HEADER} is still running")
        await asyncio.sleep(JOIN_POLL_S)


def _ended_with(final: DoneEvent | ErrorEvent) -> ReplyHandle:
    handle = ReplyHandle(final.session_key if isinstance(final, DoneEvent) else "?")
    if isinstance(final, DoneEvent):
        handle.emit(DeltaEvent(final.answer if final.joined else final.full_text))
    handle.emit(final)
    return handle


async def let_go(store: IdempotencyStore, req: IdempotentRequest) -> None:
    """Free the key of a request whose message was not stored (a retry runs it); a failure is logged: the key
    is free again after `ACCEPT_GRACE_S` anyway."""
    try:
        await store.release(req.scope, req.key)
    except StorageError as e:
        log.warning("idempotency_key_not_released", error=str(e))


async def mark_stored(store: IdempotencyStore, req: IdempotentRequest) -> None:
    try:
        await store.accepted(req.scope, req.key)
    except StorageError as e:
        log.warning("idempotency_key_not_marked", error=str(e))


def answered_once_stored(message: InboundMessage) -> bool:
    """Whether a chat request is answered once its answer is in its session (design §12): one without a key; a
    keyed one is answered once its key's answer is kept too (`answer_recorder`), after the answer is stored."""
    return METADATA not in message.metadata


def answer_recorder(store: IdempotencyStore) -> AnswerHook:
    """The inbox's hook, once a message is answered for good: the answer of one that carries a key is kept for
    its retries; a turn that failed frees its key (a retry runs it again, as one without a key would)."""

    async def record(message: InboundMessage, final: DoneEvent | ErrorEvent) -> None:
        tagged = message.metadata.get(METADATA)
        if not isinstance(tagged, dict):
            return
        scope, key = str(tagged.get("scope")), str(tagged.get("key"))
        try:
            if isinstance(final, DoneEvent):
                await store.finish(scope, key, final_to_json(final))
            else:
                await store.release(scope, key)
        except StorageError as e:  # a retry then waits for its bound: logged, never raised to the turn
            log.warning("idempotent_answer_not_kept", error=str(e))

    return record


def final_to_json(final: DoneEvent | ErrorEvent) -> dict[str, Any]:
    if isinstance(final, ErrorEvent):
        return {"error": {"code": final.code, "message": final.message}}
    done = {"full_text": final.full_text, "usage": final.usage.as_dict(), "session_key": final.session_key}
    return {"done": {**done, "joined": final.joined, "answer": final.answer}}


def final_from_json(data: dict[str, Any]) -> DoneEvent | ErrorEvent:
    if "error" in data:
        return ErrorEvent(str(data["error"]["message"]), code=str(data["error"]["code"]))
    done = data["done"]
    usage = Usage(**{k: int(v) for k, v in done.get("usage", {}).items() if k in Usage.__dataclass_fields__})
    return DoneEvent(
        str(done["full_text"]),
        usage,
        str(done.get("session_key", "")),
        joined=bool(done.get("joined")),
        answer=str(done.get("answer", "")),
    )
