"""Feishu webhook mode against a fake Feishu: challenge, signature, token, AES, dedup, groups, streaming cards."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from structlog.testing import capture_logs

from tests.support.fakes.feishu import (
    FakeFeishu,
    Harness,
    StoppableSubmitter,
    feishu_body,
    feishu_encrypt,
    feishu_headers,
    mention,
    message_event,
    other_event,
    running_channel,
)
from tests.support.fakes.feishu_payloads import aes_blob, compact_json
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.feishu import APP, APP_ID, BOT, KEY, SECRET, TOKEN, harness, post_event

TS, NONCE, SIG = "X-Lark-Request-Timestamp", "X-Lark-Request-Nonce", "X-Lark-Signature"
EXCEPTION_TEXT = ("NoneType", "operand", "Traceback", "Expecting", "padding", "ciphertext", "attribute", "decode")
"""Fragments of the Python errors these requests used to provoke; none may reach the client."""


def node_sdk_signature(headers: dict[str, str], body: bytes, encrypt_key: str) -> str:
    """What the official Node SDK (`RequestHandle.checkIsEventValidated`) expects: sha256 over timestamp, nonce,
    key and `JSON.stringify` of the parsed body, so only a body sent compact, as Feishu sends it, verifies."""
    compact = json.dumps(json.loads(body), ensure_ascii=False, separators=(",", ":"))
    content = headers["X-Lark-Request-Timestamp"] + headers["X-Lark-Request-Nonce"] + encrypt_key + compact
    return hashlib.sha256(content.encode()).hexdigest()


def test_fake_events_are_the_compact_bytes_feishu_signs() -> None:
    body = feishu_encrypt(message_event("签名 check", token=TOKEN, app_id=APP_ID), KEY)
    headers = feishu_headers(body, KEY)
    assert body == json.dumps(json.loads(body), separators=(",", ":")).encode()
    assert headers["X-Lark-Signature"] == node_sdk_signature(headers, body, KEY)
    plain = feishu_body(message_event("签名 check", token=TOKEN, app_id=APP_ID))
    assert plain == json.dumps(json.loads(plain), ensure_ascii=False, separators=(",", ":")).encode()


async def test_url_verification_challenge_is_answered_without_signature(tmp_path: Path) -> None:
    async with harness(tmp_path, ScriptedSubmitter()) as h:
        payload = {"type": "url_verification", "challenge": "ch-1", "token": TOKEN}
        status, body = await post_event(h, payload, sign=False)
    assert (status, body) == (200, {"challenge": "ch-1"})


async def test_signed_encrypted_message_streams_one_card_acked_before_the_turn(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter(chunks=6, delay_s=0.05, reply_for=lambda m: f"你好，{m.content}！" * 3)
    async with harness(tmp_path, gateway) as h:
        fake = h.fake
        event = message_event("hello there", token=TOKEN, app_id=APP_ID)
        started = time.monotonic()
        status, body = await post_event(h, event, lowercase=True)
        acked_in = time.monotonic() - started
        assert (status, body) == (200, {"msg": "success"})
        assert not fake.cards or fake.cards[next(iter(fake.cards))].streaming  # answered before the turn ended
        await fake.wait_until(lambda: fake.closed_cards() >= 1)
        final = await gateway.handles[0].result()
    message_id = event["event"]["message"]["message_id"]
    card = fake.card_for_reply(message_id)
    assert acked_in < 1.0
    assert card.card["config"]["streaming_mode"] is True
    assert card.content == final.full_text == "你好，hello there！" * 3  # type: ignore[union-attr]
    assert len(card.updates) + len(card.full_updates) >= 2
    calls_taken = len(card.updates) + len(card.full_updates) + len(card.settings)
    assert card.sequences == sorted(set(card.sequences)) and len(card.sequences) == calls_taken
    assert card.streaming is False  # closed, by one full update or by its content + settings fallback
    assert fake.sequence_errors == []
    [msg] = gateway.received
    assert (msg.channel, msg.chat_id, msg.sender_id, msg.content) == ("feishu", "ou_user1", "ou_user1", "hello there")
    assert (msg.cred_id, msg.message_id, msg.metadata["chat_type"]) == ("main", message_id, "private")
    assert fake.token_fetches == {APP_ID: 1}


def assert_fixed_error(status: int, body: Any, expected: tuple[int, str]) -> None:
    """The documented error shape `{"error": {"code", "message"}}`, carrying no exception's text."""
    assert status == expected[0], body
    assert isinstance(body, dict) and list(body) == ["error"] and sorted(body["error"]) == ["code", "message"], body
    assert body["error"]["code"] == expected[1]
    message = body["error"]["message"]
    assert isinstance(message, str) and message and not [t for t in EXCEPTION_TEXT if t.lower() in message.lower()]


async def post_raw(h: Harness, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.post(h.events_url("main"), data=body, headers=headers) as r:
        return r.status, await r.json(content_type=None)


def without(headers: dict[str, str], *names: str) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k not in names}


def header_case(case: str) -> tuple[bytes, dict[str, str]]:
    """An encrypted event for an app with an encrypt_key, with its signature headers missing, partial or wrong."""
    body = feishu_encrypt(message_event("refused", token=TOKEN, app_id=APP_ID), KEY)
    signed = feishu_headers(body, KEY)
    if case == "garbage timestamp":
        nonce = signed[NONCE]
        return body, {**signed, TS: "soon", SIG: hashlib.sha256(("soon" + nonce + KEY).encode() + body).hexdigest()}
    cases = {
        "no signature headers": without(signed, TS, NONCE, SIG),
        "only the signature": without(signed, TS, NONCE),
        "no nonce": without(signed, NONCE),
        "no signature": without(signed, SIG),
        "empty values": {**signed, TS: "", NONCE: "", SIG: ""},
        "garbage signature": {**signed, SIG: "not a hex digest"},
        "signature of another body": {**signed, SIG: feishu_headers(body + b" ", KEY)[SIG]},
    }
    return body, cases[case]


HEADER_CASES = ["no signature headers", "only the signature", "no nonce", "no signature", "empty values"]
HEADER_CASES += ["garbage timestamp", "garbage signature", "signature of another body"]


@pytest.mark.parametrize("case", HEADER_CASES)
async def test_missing_partial_or_garbage_signature_headers_are_refused_with_401(tmp_path: Path, case: str) -> None:
    gateway = ScriptedSubmitter()
    body, headers = header_case(case)
    async with harness(tmp_path, gateway) as h:
        with capture_logs() as logs:
            status, answer = await post_raw(h, body, headers)
        await asyncio.sleep(0.05)  # give a wrongly scheduled turn the chance to show up
    assert_fixed_error(status, answer, (401, "unauthorized"))
    assert [e["cred_id"] for e in logs if e["event"] == "feishu_webhook_refused"] == ["main"]
    assert gateway.received == [] and h.fake.messages == [] and h.fake.cards == {}


def body_case(case: str) -> bytes:
    """A body Feishu never sends (signed correctly, so only the body itself is wrong)."""
    event = message_event("refused", token=TOKEN, app_id=APP_ID)
    cases = {
        "malformed JSON": b'{"encrypt":',
        "not UTF-8": b'{"encrypt":"\xff\xfe"}',
        "a JSON array": b'["encrypt"]',
        "a JSON string": b'"encrypt"',
        "encrypt is not a string": b'{"encrypt":5}',
        "encrypt is empty": b'{"encrypt":""}',
        "bad base64": b'{"encrypt":"%%% not base64 %%%"}',
        "not AES": compact_json({"encrypt": base64.b64encode(b"too short to be AES").decode()}).encode(),
        "another key": feishu_encrypt(event, "other-key"),
        "plaintext not JSON": compact_json({"encrypt": aes_blob(b"<xml>not json</xml>", KEY)}).encode(),
        "plaintext not an object": compact_json({"encrypt": aes_blob(b"[1, 2]", KEY)}).encode(),
        "plaintext not UTF-8": compact_json({"encrypt": aes_blob(bytes([0xFF, 0xFE, 0x7B]), KEY)}).encode(),
    }
    return cases[case]


BODY_CASES = ["malformed JSON", "not UTF-8", "a JSON array", "a JSON string", "encrypt is not a string"]
BODY_CASES += ["encrypt is empty", "bad base64", "not AES", "another key", "plaintext not JSON"]
BODY_CASES += ["plaintext not an object", "plaintext not UTF-8"]


@pytest.mark.parametrize("case", BODY_CASES)
async def test_a_body_that_is_not_a_readable_event_is_refused_with_400(tmp_path: Path, case: str) -> None:
    gateway = ScriptedSubmitter()
    body = body_case(case)
    async with harness(tmp_path, gateway) as h:
        with capture_logs() as logs:
            status, answer = await post_raw(h, body, feishu_headers(body, KEY))
        await asyncio.sleep(0.05)
    assert_fixed_error(status, answer, (400, "bad_request"))
    assert [e["cred_id"] for e in logs if e["event"] == "feishu_webhook_refused"] == ["main"]
    assert gateway.received == [] and h.fake.messages == []


async def test_an_oversized_body_is_refused_with_413(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    body = compact_json({"encrypt": "A" * (1 << 20)}).encode()  # over the server's body limit (1 MiB here)
    async with harness(tmp_path, gateway) as h:
        with capture_logs() as logs:
            status, answer = await post_raw(h, body, feishu_headers(body, KEY))
    assert_fixed_error(status, answer, (413, "payload_too_large"))
    refused = [e["path"] for e in logs if e["event"] == "http_body_too_large"]  # by its head, before the channel
    assert refused == ["/feishu/main/events"]
    assert gateway.received == []


def unsigned_case(case: str) -> bytes:
    event = message_event("unsigned", token=TOKEN, app_id=APP_ID)
    v1 = {"uuid": "u1", "token": TOKEN, "type": "url_verification", "event": {"type": "message", "text": "hi"}}
    cases = {
        "plaintext event": feishu_body(event),
        "v2 event posing as the URL verification": feishu_encrypt({**event, "type": "url_verification"}, KEY),
        "v1 event posing as the URL verification": feishu_encrypt(v1, KEY),
    }
    return cases[case]


UNSIGNED_CASES = ["plaintext event", "v2 event posing as the URL verification"]
UNSIGNED_CASES += ["v1 event posing as the URL verification"]


@pytest.mark.parametrize("case", UNSIGNED_CASES)
async def test_an_unsigned_event_to_an_app_with_an_encrypt_key_is_refused(tmp_path: Path, case: str) -> None:
    gateway = ScriptedSubmitter()
    body = unsigned_case(case)
    async with harness(tmp_path, gateway) as h:
        status, answer = await post_raw(h, body, {"Content-Type": "application/json"})
        await asyncio.sleep(0.05)
    assert_fixed_error(status, answer, (401, "unauthorized"))
    assert gateway.received == []


async def test_a_signed_event_the_sdk_cannot_read_gets_a_fixed_500(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    body = feishu_encrypt({"schema": "2.0", "event": {}}, KEY)  # an envelope without its header
    async with harness(tmp_path, gateway) as h:
        with capture_logs() as logs:
            status, answer = await post_raw(h, body, feishu_headers(body, KEY))
    assert_fixed_error(status, answer, (500, "internal"))
    assert [e["cred_id"] for e in logs if e["event"] == "feishu_webhook_failed"] == ["main"]
    assert gateway.received == []


@pytest.mark.parametrize("tamper", ["signature", "token", "missing_headers"])
async def test_bad_signature_or_token_is_refused_and_nothing_is_processed(tmp_path: Path, tamper: str) -> None:
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway) as h:
        fake = h.fake
        event = message_event("hi", token="wrong-token" if tamper == "token" else TOKEN, app_id=APP_ID)
        body = feishu_encrypt(event, KEY)
        headers = feishu_headers(body, KEY)
        if tamper == "signature":
            headers["X-Lark-Signature"] = "0" * 64
        if tamper == "missing_headers":
            headers = {"Content-Type": "application/json"}
        with capture_logs() as logs:
            status, answer = await post_raw(h, body, headers)
        await asyncio.sleep(0.05)  # give a wrongly scheduled turn the chance to show up
    assert_fixed_error(status, answer, (401, "unauthorized"))
    assert [e["event"] for e in logs if e["event"].startswith("feishu_webhook")] == ["feishu_webhook_refused"]
    assert gateway.received == [] and fake.messages == [] and fake.cards == {}


async def test_an_event_while_the_daemon_drains_gets_503_and_its_redelivery_is_answered(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway) as h:
        event = message_event("while draining", token=TOKEN, app_id=APP_ID)
        gateway.accepting = False  # the daemon is draining: Feishu must redeliver, not count it delivered
        status, answer = await post_event(h, event)
        gateway.accepting = True
        assert await post_event(h, event) == (200, {"msg": "success"})
        await h.fake.wait_until(lambda: h.fake.closed_cards() == 1)
    assert_fixed_error(status, answer, (503, "shutdown"))
    assert [m.content for m in gateway.received] == ["while draining"]


async def test_unsubscribed_and_no_op_event_types_are_acknowledged(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway) as h:
        unknown = await post_event(h, other_event("contact.user.created_v3", TOKEN))
        reaction = await post_event(h, other_event("im.message.reaction.created_v1", TOKEN))
    assert unknown == (200, {"msg": "success"}) and reaction == (200, {"msg": "success"})
    assert gateway.received == []


async def test_malformed_body_and_unknown_app_get_clear_errors(tmp_path: Path) -> None:
    async with harness(tmp_path, ScriptedSubmitter()) as h, aiohttp.ClientSession() as s:
        async with s.post(h.events_url("main"), data=b"not json") as r:
            assert_fixed_error(r.status, await r.json(), (400, "bad_request"))
            assert "JSON" in (await r.json())["error"]["message"]
        async with s.post(h.events_url("nope"), data=b"{}") as r:
            assert_fixed_error(r.status, await r.json(), (404, "not_found"))


async def test_same_message_id_three_times_and_after_restart_gets_one_answer(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    event = message_event("once", token=TOKEN, app_id=APP_ID, message_id="om_dup_1")
    async with FakeFeishu({APP_ID: SECRET}) as fake:
        async with running_channel(fake, tmp_path, {"main": APP}, gateway) as h:
            copies = [{**event, "header": {**event["header"], "event_id": f"e{i}"}} for i in range(3)]
            results = await asyncio.gather(*(post_event(h, copy) for copy in copies))
            assert all(r == (200, {"msg": "success"}) for r in results)
            await fake.wait_until(lambda: fake.closed_cards() >= 1)
        async with running_channel(fake, tmp_path, {"main": APP}, gateway) as h:
            assert await post_event(h, event) == (200, {"msg": "success"})
            await asyncio.sleep(0.1)  # a wrongly accepted redelivery would submit within this
    assert len(gateway.received) == 1
    assert len([m for m in fake.messages if m.target == "om_dup_1"]) == 1


def group_event(text: str, mentions: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    return message_event(
        text, token=TOKEN, app_id=APP_ID, chat_type="group", chat_id="oc_group1", mentions=mentions, **kw
    )


async def test_group_messages_answer_only_when_the_bot_is_mentioned(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway) as h:
        fake = h.fake
        ignored = group_event("@_user_1 look at this", [mention("@_user_1", "ou_alice", "Alice")])
        assert await post_event(h, ignored) == (200, {"msg": "success"})
        addressed = group_event(
            "@_user_1 ask @_user_2 about it",
            [mention("@_user_1", BOT, "AgentBot"), mention("@_user_2", "ou_alice", "Alice")],
        )
        await post_event(h, addressed)
        restart = group_event("@_user_1 /restart", [mention("@_user_1", BOT, "AgentBot")], sender="ou_bob")
        await post_event(h, restart)
        await gateway.wait_for(2)
        await fake.wait_until(lambda: fake.closed_cards() >= 2)
    assert [m.content for m in gateway.received] == ["ask @Alice about it", "/restart"]
    assert {m.chat_id for m in gateway.received} == {"oc_group1"}
    assert not [m for m in fake.messages if m.target == ignored["event"]["message"]["message_id"]]


async def test_per_member_sessions_and_allow_list(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    app = {**APP, "group_session_scope": "group_sender", "allow_from": ["ou_bob"]}
    async with harness(tmp_path, gateway, {"main": app}) as h:
        fake = h.fake
        for sender in ("ou_alice", "ou_bob"):
            await post_event(h, group_event("@_user_1 hi", [mention("@_user_1", BOT, "Bot")], sender=sender))
        await gateway.wait_for(1)
        await fake.wait_until(lambda: fake.closed_cards() >= 1)
    assert [m.chat_id for m in gateway.received] == ["oc_group1:ou_bob"]


async def test_stop_aborts_the_turn_and_its_card_is_still_closed(tmp_path: Path) -> None:
    gateway = StoppableSubmitter(chunks=40, delay_s=0.05, reply_for=lambda m: "x" * 400 if m.content == "go" else "ok")
    async with harness(tmp_path, gateway) as h:
        fake = h.fake
        first = message_event("go", token=TOKEN, app_id=APP_ID)
        await post_event(h, first)
        await fake.wait_until(lambda: any(c.updates for c in fake.cards.values()))
        await post_event(h, message_event("/stop", token=TOKEN, app_id=APP_ID))
        await fake.wait_until(lambda: fake.closed_cards() >= 2)
    card = fake.card_for_reply(first["event"]["message"]["message_id"])
    assert card.streaming is False and "已停止" in card.content and card.content.startswith("x")
    assert card.sequences == sorted(set(card.sequences)) and fake.sequence_errors == []


async def test_failed_turn_closes_the_card_with_the_error(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter(fail_with="模型暂时不可用")
    async with harness(tmp_path, gateway) as h:
        fake = h.fake
        await post_event(h, message_event("hi", token=TOKEN, app_id=APP_ID))
        await fake.wait_until(lambda: fake.closed_cards() >= 1)
    [card] = fake.cards.values()
    assert "模型暂时不可用" in card.content and card.streaming is False


async def test_without_cardkit_permission_it_falls_back_to_a_normal_reply(tmp_path: Path) -> None:
    reply = "**Bold** answer with a [link](https://example.com)"
    gateway = ScriptedSubmitter(reply_for=lambda m: reply)
    async with harness(tmp_path, gateway) as h:
        fake = h.fake
        fake.cardkit_denied = True
        for n in (1, 2):
            await post_event(h, message_event("hi", token=TOKEN, app_id=APP_ID))
            await fake.wait_until(lambda n=n: len(fake.replies()) == n)
    assert [m.msg_type for m in fake.replies()] == ["post", "post"]
    assert fake.replies()[0].content["zh_cn"]["content"][0][0] == {"tag": "md", "text": reply}
    assert [op for op, _, _ in fake.calls].count("card_create") == 1  # permission remembered


async def test_rate_limited_card_updates_back_off_and_still_finish(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter(chunks=4, delay_s=0.02)
    async with harness(tmp_path, gateway) as h:
        fake = h.fake
        fake.rate_limit = {"card_update": 2, "reply": 1}
        await post_event(h, message_event("limited", token=TOKEN, app_id=APP_ID))
        await fake.wait_until(lambda: fake.closed_cards() >= 1)
    [card] = fake.cards.values()
    assert card.content == "echo: limited" and fake.rate_limited.count("card_update") == 2
    assert [(text, streaming) for _, text, streaming in card.full_updates] == [("echo: limited", False)]
    assert card.settings == []  # retried within the gate, no fallback to the two-call close
    assert "reply" in fake.rate_limited and len(fake.replies()) == 1


async def test_unsupported_type_gets_a_clear_reply_and_reaction_ack(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    app = {**APP, "ack_reaction": "OnIt"}
    async with harness(tmp_path, gateway, {"main": app}) as h:
        fake = h.fake
        sticker = {"file_key": "file_v3_sticker"}
        await post_event(h, message_event("", token=TOKEN, app_id=APP_ID, message_type="sticker", content=sticker))
        text = message_event("hi", token=TOKEN, app_id=APP_ID)
        await post_event(h, text)
        await fake.wait_until(lambda: fake.closed_cards() >= 1 and len(fake.reactions) == 1)
    [unsupported] = [m for m in fake.replies() if m.msg_type == "text"]
    assert unsupported.content["text"] == "抱歉，我还不能处理这种消息（表情包）。可以发文字、图片或文件。"
    assert fake.reactions == [(text["event"]["message"]["message_id"], "OnIt")]
    assert [m.content for m in gateway.received] == ["hi"]


async def test_a_failing_app_is_reported_and_the_others_keep_working(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    bad = {**APP, "app_id": "cli_bad", "app_secret": "wrong"}
    apps = {"main": APP, "bad": bad}
    async with harness(tmp_path, gateway, apps, {APP_ID: SECRET, "cli_bad": "right"}) as h:
        fake = h.fake
        assert h.channel.apps["bad"].status == "failed" and h.channel.apps["main"].status == "ready"
        async with aiohttp.ClientSession() as s, s.post(h.events_url("bad"), data=b"{}") as r:
            assert_fixed_error(r.status, await r.json(), (503, "unavailable"))
        await post_event(h, message_event("still here", token=TOKEN, app_id=APP_ID))
        await fake.wait_until(lambda: fake.closed_cards() >= 1)
    assert [m.content for m in gateway.received] == ["still here"]


async def test_plaintext_webhook_without_encrypt_key_checks_the_token(tmp_path: Path) -> None:
    app = {k: v for k, v in APP.items() if k != "encrypt_key"}
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway, {"main": app}) as h:
        fake = h.fake
        async with aiohttp.ClientSession() as s:
            good = feishu_body(message_event("plain", token=TOKEN, app_id=APP_ID))
            async with s.post(h.events_url("main"), data=good) as r:
                assert r.status == 200
            bad = feishu_body(message_event("forged", token="nope", app_id=APP_ID))
            async with s.post(h.events_url("main"), data=bad) as r:
                assert_fixed_error(r.status, await r.json(), (401, "unauthorized"))
            async with s.post(h.events_url("main"), data=b"[]") as r:
                assert_fixed_error(r.status, await r.json(), (400, "bad_request"))
        await fake.wait_until(lambda: fake.closed_cards() >= 1)
    assert [m.content for m in gateway.received] == ["plain"]


async def test_an_app_that_cannot_reach_feishu_at_start_comes_up_by_itself(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    async with FakeFeishu({APP_ID: SECRET}) as fake:
        fake.unavailable = 10_000  # Feishu is down until the test says otherwise
        with capture_logs() as logs:
            async with running_channel(fake, tmp_path, {"main": APP}, gateway, start_retry_s=0.05) as h:
                assert h.channel.apps["main"].status == "failed"
                status, _ = await post_event(h, message_event("while down", token=TOKEN, app_id=APP_ID))
                assert status == 503  # not acked: Feishu redelivers it later
                await fake.wait_until(lambda: len(fake.refused) >= 2)  # the start attempt and at least one retry
                fake.unavailable = 0  # Feishu is back
                await fake.wait_until(lambda: h.channel.apps["main"].status == "ready")
                status, _ = await post_event(h, message_event("after the outage", token=TOKEN, app_id=APP_ID))
                assert status == 200
                await fake.wait_until(lambda: fake.closed_cards() == 1)
    assert set(fake.refused) == {"/open-apis/auth/v3/tenant_access_token/internal"}  # each attempt stopped there
    failures = [e for e in logs if e["event"] == "feishu_app_start_failed"]
    delays = [e["retry_in_s"] for e in failures]
    assert delays[:2] == [0.05, 0.1] and all(b == min(a * 2, 300) for a, b in itertools.pairwise(delays))
    assert SECRET not in json.dumps(failures)
    assert [m.content for m in gateway.received] == ["after the outage"]


async def test_stopping_while_an_app_waits_to_retry_ends_its_retries(tmp_path: Path) -> None:
    async with FakeFeishu({APP_ID: SECRET}) as fake:
        fake.unavailable = 10_000
        async with running_channel(fake, tmp_path, {"main": APP}, ScriptedSubmitter(), start_retry_s=0.02) as h:
            await fake.wait_until(lambda: len(fake.refused) >= 3)
        refused = len(fake.refused)
        await asyncio.sleep(0.3)
        assert len(fake.refused) == refused and h.channel.apps["main"].status == "failed"


async def test_a_signed_event_older_than_the_dedup_memory_is_refused(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway) as h:
        nine_hours_ago = time.time() - 9 * 3600  # the dedup TTL is 8 h: a replay could be answered again
        status, body = await post_event(
            h, message_event("replayed", token=TOKEN, app_id=APP_ID), sent_at=nine_hours_ago
        )
        assert_fixed_error(status, body, (401, "unauthorized"))
        assert "replay window" in body["error"]["message"]
        fresh = message_event("fresh", token=TOKEN, app_id=APP_ID)
        assert (await post_event(h, fresh, sent_at=time.time() - 60, lowercase=True))[0] == 200
        await h.fake.wait_until(lambda: h.fake.closed_cards() == 1)
    assert [m.content for m in gateway.received] == ["fresh"]


@pytest.mark.parametrize("body", [b"[" * 100_000, b'{"a":' * 100_000])
async def test_json_nested_deeper_than_the_parser_goes_is_a_clean_400(tmp_path: Path, body: bytes) -> None:
    """Parsed before the signature check, so anyone can send it: a 400 in the documented shape, never a 500."""
    async with harness(tmp_path, ScriptedSubmitter()) as h:
        status, answer = await post_raw(h, body, {"Content-Type": "application/json"})
    assert_fixed_error(status, answer, (400, "bad_request"))
