"""Feishu event payloads built the way Feishu builds them: v2 envelopes, AES-256-CBC encryption, signatures."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import os
import time
from typing import Any

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes


def compact_json(value: Any) -> str:
    """JSON the way Feishu sends it (and the official Node SDK re-serialises it to check a signature:
    `JSON.stringify`): no spaces, non-ASCII as is."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def feishu_body(payload: dict[str, Any]) -> bytes:
    """A plaintext event body (an app without an encrypt_key), compact like Feishu's."""
    return compact_json(payload).encode()


def feishu_encrypt(payload: dict[str, Any], encrypt_key: str) -> bytes:
    """`{"encrypt":base64(IV | AES-256-CBC(sha256(key), PKCS#7(json)))}`, compact, byte for byte as Feishu
    sends (and signs) it."""
    return compact_json({"encrypt": aes_blob(compact_json(payload).encode(), encrypt_key)}).encode()


def aes_blob(data: bytes, encrypt_key: str) -> str:
    """base64(IV | AES-256-CBC(sha256(key), PKCS#7(data))): the `encrypt` value for any plaintext bytes."""
    key = hashlib.sha256(encrypt_key.encode()).digest()
    iv = os.urandom(16)
    pad = 16 - len(data) % 16
    data += bytes([pad]) * pad
    enc = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + enc.update(data) + enc.finalize()).decode()


def feishu_headers(
    body: bytes, encrypt_key: str, *, lowercase: bool = False, sent_at: float | None = None
) -> dict[str, str]:
    """The signature headers: sha256(timestamp + nonce + encrypt_key + raw body), signed at `sent_at` (now).
    `body` must be sent as it is: Feishu signs the exact (compact) bytes it posts."""
    ts, nonce = str(int(time.time() if sent_at is None else sent_at)), os.urandom(8).hex()
    sig = hashlib.sha256((ts + nonce + encrypt_key).encode() + body).hexdigest()
    headers = {"X-Lark-Request-Timestamp": ts, "X-Lark-Request-Nonce": nonce, "X-Lark-Signature": sig}
    headers["Content-Type"] = "application/json"
    return {k.lower(): v for k, v in headers.items()} if lowercase else headers


_ids = itertools.count(1)


def message_event(
    text: str,
    *,
    token: str = "",
    app_id: str = "cli_test",
    chat_type: str = "p2p",
    chat_id: str = "oc_chat1",
    sender: str = "ou_user1",
    message_id: str | None = None,
    event_id: str | None = None,
    mentions: list[dict[str, Any]] | None = None,
    message_type: str = "text",
    content: dict[str, Any] | None = None,
    create_time_ms: int | None = None,
    root_id: str = "",
    parent_id: str | None = None,
    sender_type: str = "user",
) -> dict[str, Any]:
    """A v2 `im.message.receive_v1` envelope; a reply carries `parent_id` (by default the topic's `root_id`)."""
    n = next(_ids)
    created = str(create_time_ms if create_time_ms is not None else int(time.time() * 1000))
    return {
        "schema": "2.0",
        "header": {
            "event_id": event_id or f"ev_{n}_{os.urandom(4).hex()}",
            "event_type": "im.message.receive_v1",
            "token": token,
            "create_time": created,
            "app_id": app_id,
            "tenant_key": "tk_1",
        },
        "event": {
            "sender": {
                "sender_id": {"open_id": sender, "user_id": f"u_{sender}", "union_id": f"on_{sender}"},
                "sender_type": sender_type,
                "tenant_key": "tk_1",
            },
            "message": {
                "message_id": message_id or f"om_{n}_{os.urandom(4).hex()}",
                "root_id": root_id,
                "parent_id": root_id if parent_id is None else parent_id,
                "create_time": created,
                "chat_id": chat_id,
                "chat_type": chat_type,
                "message_type": message_type,
                "content": compact_json(content if content is not None else {"text": text}),
                "mentions": mentions or [],
            },
        },
    }


def mention(key: str, open_id: str, name: str) -> dict[str, Any]:
    return {"key": key, "id": {"open_id": open_id, "user_id": "", "union_id": ""}, "name": name, "tenant_key": "tk_1"}


def other_event(event_type: str, token: str = "") -> dict[str, Any]:
    return {
        "schema": "2.0",
        "header": {"event_id": f"ev_{next(_ids)}", "event_type": event_type, "token": token, "app_id": "cli"},
        "event": {"anything": True},
    }


def ws_frame(frame_cls: Any, method: int, headers: dict[str, str], payload: bytes, service: int) -> bytes:
    """One lark long-connection frame (`pbbp2.Frame`), serialised."""
    frame = frame_cls()
    frame.SeqID = 1
    frame.LogID = 1
    frame.service = service
    frame.method = method
    for key, value in headers.items():
        header = frame.headers.add()
        header.key = key
        header.value = value
    frame.payload = payload
    return bytes(frame.SerializeToString())
