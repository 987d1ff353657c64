"""Feishu webhook requests: checked before lark-oapi's dispatcher sees them, answered with fixed JSON errors."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

import structlog
from aiohttp import web

from agenthub import jsonsafe
from channels.toolkit.replay import stale_reason

log = structlog.get_logger(__name__)

SIGNATURE_HEADERS = ("X-Lark-Request-Timestamp", "X-Lark-Request-Nonce", "X-Lark-Signature")
NOT_AUTHENTIC = "the request's signature or verification token is not valid"
_SDK_AUTH_FAILURES = ("signature verification failed", "invalid verification_token", "encrypt_key not found")
"""lark-oapi's own refusals (`{"msg": "<error>"}` with a 500), should one get past `check_request`."""


class Refused(Exception):
    """A webhook request answered with an error: `status`, `code` and `message` (a fixed text) are what the
    client sees, in the documented `{"error": {"code", "message"}}` shape; `reason` is for the log only."""

    def __init__(self, status: int, code: str, message: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.code = code
        self.message = message
        self.reason = reason


def unauthorized(reason: str, message: str = NOT_AUTHENTIC) -> Refused:
    return Refused(401, "unauthorized", message, reason)


def bad_request(reason: str, message: str) -> Refused:
    return Refused(400, "bad_request", message, reason)


async def read_body(request: web.Request) -> bytes:
    """The raw body, exactly the bytes the signature covers; over the server's body limit it is refused."""
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge as e:
        raise Refused(413, "payload_too_large", "the request body is too large", e.text or "") from None


def check_request(headers: Mapping[str, str], body: bytes, *, encrypt_key: str, replay_window_s: float) -> None:
    """Raise `Refused` for anything lark-oapi's dispatcher would answer with a 500 carrying its error text:
    a body that is not a JSON object, or (with an encrypt_key) not decryptable into one; signature headers that
    are partial, stale or do not match the raw body; an unsigned request that is not the URL verification
    (which Feishu may send without signature headers). The verification token is left to the dispatcher."""
    envelope = json_object(body, "the body must be a JSON object")
    if not encrypt_key:
        if "encrypt" in envelope:
            raise unauthorized("an encrypted event, but this app has no encrypt_key")
        return
    signature = signature_headers(headers)
    if signature is not None:
        verify_signature(signature, body, encrypt_key, replay_window_s)
    event = decrypt(envelope, encrypt_key)
    if signature is None and event_type(event) != "url_verification":
        raise unauthorized("an unsigned event that is not the URL verification")


def event_type(event: dict[str, Any]) -> object:
    """The type as the dispatcher reads it: a v2 envelope's `header.event_type`, a v1 event's `event.type`,
    otherwise the top-level `type` (the URL verification's)."""
    if event.get("schema"):
        header = event.get("header")
        return header.get("event_type") if isinstance(header, dict) else None
    if event.get("uuid"):
        inner = event.get("event")
        return inner.get("type") if isinstance(inner, dict) else None
    return event.get("type")


def json_object(data: bytes, message: str) -> dict[str, Any]:
    try:
        value = jsonsafe.loads(data.decode("utf-8"))
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError both are
        raise bad_request(f"not JSON: {e}", message) from None
    if not isinstance(value, dict):
        raise bad_request(f"a JSON {type(value).__name__}, not an object", message)
    return value


def signature_headers(headers: Mapping[str, str]) -> tuple[str, str, str] | None:
    """Timestamp, nonce and signature; None when none of them came (an empty value counts as absent)."""
    timestamp, nonce, signature = (headers.get(name, "") for name in SIGNATURE_HEADERS)
    if not (timestamp or nonce or signature):
        return None
    if not (timestamp and nonce and signature):
        given = [name for name, value in zip(SIGNATURE_HEADERS, (timestamp, nonce, signature), strict=True) if value]
        raise unauthorized(f"incomplete signature headers: only {', '.join(given)}")
    return timestamp, nonce, signature


def verify_signature(signature: tuple[str, str, str], body: bytes, encrypt_key: str, window_s: float) -> None:
    """Feishu signs sha256(timestamp + nonce + encrypt_key + raw body); a timestamp outside the replay window
    (the dedup memory) is refused even when its signature matches."""
    timestamp, nonce, given = signature
    stale = stale_reason(timestamp, window_s)
    if stale is not None:
        raise unauthorized(stale, "the request's timestamp is outside the replay window")
    expected = hashlib.sha256((timestamp + nonce + encrypt_key).encode() + body).hexdigest()
    if not hmac.compare_digest(expected.encode(), given.encode("utf-8", "surrogateescape")):
        raise unauthorized("signature verification failed")


def decrypt(envelope: dict[str, Any], encrypt_key: str) -> dict[str, Any]:
    """The event inside `{"encrypt": base64(IV | AES-256-CBC(sha256(key), PKCS#7(json)))}`; a plaintext
    envelope as it is."""
    if "encrypt" not in envelope:
        return envelope
    message = "the encrypted body cannot be decrypted with this app's encrypt_key"
    blob = envelope["encrypt"]
    if not isinstance(blob, str) or not blob:
        raise bad_request("`encrypt` is not a non-empty string", message)
    from lark_oapi.core.utils import AESCipher  # the dispatcher's own cipher: what it accepts, we accept

    try:
        plaintext: bytes = AESCipher(encrypt_key).decrypt(base64.b64decode(blob, validate=True))
    except (binascii.Error, ValueError) as e:
        raise bad_request(f"cannot decrypt: {e}", message) from None
    return json_object(plaintext, message)


def dispatch(dispatcher: Any, request: web.Request, body: bytes) -> web.Response:
    """Run lark-oapi's dispatcher (AES and JSON only: fine on the loop thread); its success answer goes out as
    it is, any failure as a fixed error instead of its `{"msg": "<exception text>"}`."""
    from lark_oapi.core.model import RawRequest

    raw = RawRequest()
    raw.uri = request.path
    raw.body = body
    raw.headers = request.headers  # case-insensitive: the SDK looks headers up in exact case
    resp = dispatcher.do(raw)
    content = bytes(resp.content or b"")
    if int(resp.status_code) != 200:
        raise dispatcher_failure(content.decode("utf-8", "replace"))
    return web.Response(body=content, content_type="application/json")


def dispatcher_failure(text: str) -> Refused:
    reason = f"lark-oapi: {text[:200]}"
    if any(failure in text for failure in _SDK_AUTH_FAILURES):
        return unauthorized(reason)
    return Refused(500, "internal", "the event could not be handled", reason)


def log_refusal(cred_id: str, refused: Refused) -> None:
    if refused.status == 503:
        log.info("feishu_event_deferred", cred_id=cred_id, reason=refused.reason)
    elif refused.status >= 500:
        log.error("feishu_webhook_failed", cred_id=cred_id, reason=refused.reason)
    else:
        log.warning("feishu_webhook_refused", cred_id=cred_id, status=refused.status, reason=refused.reason)
