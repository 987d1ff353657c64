"""Self-built app callbacks against a fake WeCom: verification, timing, dedup, bad input, message types."""

from __future__ import annotations

import asyncio
import gc
import time
import warnings
from pathlib import Path

import aiohttp
import pytest
import yarl
from structlog.testing import capture_logs

from agenthub import i18n
from agenthub.config import Settings
from agenthub.errors import ConfigError
from agenthub.gateway.handle import ReplyHandle
from agenthub.messages import InboundMessage
from channels.wecom import WeComChannel
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.fakes.wecom import (
    FakeQyApi,
    channel_context,
    message_xml,
    serve_routes,
    signed_callback,
    signed_echo,
    wecom_encrypt,
    wecom_signature,
)
from tests.support.wecom import AES_KEY, AGENT_ID, CORP_ID, TOKEN, Harness, app_table, text


async def test_url_verification_returns_the_plaintext_only(harness: Harness) -> None:
    await harness.start()
    query = signed_echo("8237461527364", token=TOKEN, aes_key=AES_KEY, corp_id=CORP_ID)
    async with harness.http.get(harness.url().with_query(query)) as resp:
        assert resp.status == 200
        assert await resp.read() == b"8237461527364"


async def test_url_verification_with_raw_plus_or_bad_signature_is_403(harness: Harness) -> None:
    await harness.start()
    query = signed_echo("1234", token=TOKEN, aes_key=AES_KEY, corp_id=CORP_ID)
    while "+" not in query["echostr"]:
        query = signed_echo("1234", token=TOKEN, aes_key=AES_KEY, corp_id=CORP_ID)
    raw = "&".join(f"{k}={v}" for k, v in query.items())  # unencoded: '+' arrives as a space
    async with harness.http.get(yarl.URL(f"{harness.url()}?{raw}", encoded=True)) as resp:
        assert resp.status == 403
    query["msg_signature"] = "f" * 40
    async with harness.http.get(harness.url().with_query(query)) as resp:
        assert resp.status == 403


async def test_callback_acks_before_the_slow_llm_and_reply_goes_through_message_send(
    harness: Harness, api: FakeQyApi
) -> None:
    harness.submitter.delay_s = 0.4  # three chunks: the model takes 1.2 s (test_wecom_e2e runs a 3 s model)
    await harness.start()
    started = time.monotonic()
    status, body = await harness.post(text("你好"))
    elapsed = time.monotonic() - started
    assert (status, body) == (200, "")
    assert elapsed < 0.5
    assert api.sends == []
    await api.wait_for(lambda: len(api.sends) == 1, timeout=5)
    sent = api.sends[0]
    assert sent["touser"] == "zhangsan"
    assert sent["agentid"] == AGENT_ID
    assert sent["msgtype"] == "text"
    assert sent["text"]["content"] == "echo: 你好"
    assert time.monotonic() - started >= 1.2
    message = harness.submitter.received[0]
    assert (message.channel, message.chat_id, message.sender_id) == ("wecom", "zhangsan", "zhangsan")
    assert (message.message_id, message.cred_id, message.agent) == ("7001", "hr", "helper")
    assert message.metadata["chat_type"] == "private"  # an app chat is always one person's


async def test_same_msgid_three_times_gives_one_send(harness: Harness, api: FakeQyApi) -> None:
    await harness.start()
    xml = text("重复的问题", msg_id=424242)
    for _ in range(3):
        assert await harness.post(xml) == (200, "")
    await harness.settle()
    assert len(harness.submitter.received) == 1
    assert api.texts() == ["echo: 重复的问题"]


async def test_retry_after_a_daemon_restart_is_not_answered_again(harness: Harness, api: FakeQyApi) -> None:
    await harness.start()
    xml = text("重启前的问题", msg_id=99)
    assert await harness.post(xml) == (200, "")
    await harness.settle()
    await harness.restart()
    assert await harness.post(xml) == (200, "")
    await harness.settle()
    assert len(harness.submitter.received) == 1
    assert len(api.sends) == 1


async def test_forged_signature_is_403_and_leaves_no_trace(harness: Harness, api: FakeQyApi) -> None:
    await harness.start()
    assert (await harness.post(text("伪造"), corrupt_signature=True))[0] == 403
    await harness.settle()
    assert harness.submitter.received == []
    assert api.attempts == []
    assert harness.channel is not None and len(harness.channel.apps["hr"]._dedup) == 0


async def test_a_replayed_callback_older_than_the_dedup_memory_is_403(harness: Harness, api: FakeQyApi) -> None:
    await harness.start()
    seven_hours_ago = time.time() - 7 * 3600  # the dedup TTL is 6 h: its MsgId could be forgotten by now
    status, reason = await harness.post(text("旧的请求", msg_id=501), sent_at=seven_hours_ago)
    assert status == 403 and "replay window" in reason
    assert (await harness.post(text("未来的请求", msg_id=502), sent_at=time.time() + 7 * 3600))[0] == 403
    assert (await harness.post(text("一小时前", msg_id=503), sent_at=time.time() - 3600))[0] == 200
    await harness.settle()
    assert [m.content for m in harness.submitter.received] == ["一小时前"]
    assert len(api.sends) == 1


async def test_malformed_xml_is_400_and_leaves_no_trace(harness: Harness, api: FakeQyApi) -> None:
    await harness.start()
    async with harness.http.post(
        harness.url().with_query({"msg_signature": "x", "timestamp": "1", "nonce": "n"}), data="<xml><Encrypt>"
    ) as resp:
        assert resp.status == 400
    # Correctly signed and encrypted, but the decrypted message is not XML.
    status, _ = await harness.post("<xml><MsgType>text</MsgType")
    assert status == 400
    # Encrypted for another corp: the receive_id check fails.
    enc = wecom_encrypt(text("x"), "ww-other-corp", AES_KEY)
    query = {"msg_signature": wecom_signature(TOKEN, "1", "n", enc), "timestamp": "1", "nonce": "n"}
    body = f"<xml><Encrypt><![CDATA[{enc}]]></Encrypt></xml>"
    async with harness.http.post(harness.url().with_query(query), data=body) as resp:
        assert resp.status == 400
    await harness.settle()
    assert harness.submitter.received == []
    assert api.attempts == []


async def test_unknown_cred_id_is_404(harness: Harness) -> None:
    await harness.start()
    query, body = signed_callback(text("x"), token=TOKEN, aes_key=AES_KEY, corp_id=CORP_ID)
    async with harness.http.post(harness.url("nobody").with_query(query), data=body) as resp:
        assert resp.status == 404


async def test_voice_recognition_goes_in_as_text(harness: Harness, api: FakeQyApi) -> None:
    await harness.start()
    fields: dict[str, str | int] = {
        "MsgType": "voice",
        "MediaId": "m1",
        "Format": "amr",
        "Recognition": "明天开会吗",
        "MsgId": 5,
    }
    assert await harness.post(message_xml(CORP_ID, "lisi", AGENT_ID, fields)) == (200, "")
    await harness.settle()
    assert harness.submitter.received[0].content == "明天开会吗"
    assert api.texts() == ["echo: 明天开会吗"]


async def test_unsupported_types_get_a_clear_reply_and_skip_the_agent(harness: Harness, api: FakeQyApi) -> None:
    await harness.start()
    video: dict[str, str | int] = {"MsgType": "video", "MediaId": "m", "ThumbMediaId": "t", "MsgId": 6}
    location: dict[str, str | int] = {"MsgType": "location", "Location_X": "23.1", "Location_Y": "113.3", "MsgId": 8}
    await harness.post(message_xml(CORP_ID, "lisi", AGENT_ID, video))
    await harness.post(message_xml(CORP_ID, "lisi", AGENT_ID, location))
    await harness.settle()
    assert harness.submitter.received == []
    expected = [i18n.text("media.unsupported", "zh-CN", kind=kind) for kind in ("video", "location")]
    assert sorted(api.texts()) == sorted(expected)


async def test_the_operators_unsupported_text_replaces_the_catalogues(harness: Harness, api: FakeQyApi) -> None:
    await harness.start(unsupported="请发送文字。")
    await harness.post(message_xml(CORP_ID, "lisi", AGENT_ID, {"MsgType": "link", "Url": "https://x", "MsgId": 9}))
    await harness.settle()
    assert api.texts() == ["请发送文字。"]


async def test_enter_agent_event_sends_the_configured_welcome_once(harness: Harness, api: FakeQyApi) -> None:
    await harness.start(welcome="欢迎使用 AgentHub")
    event: dict[str, str | int] = {"MsgType": "event", "Event": "enter_agent", "EventKey": ""}
    xml = message_xml(CORP_ID, "wangwu", AGENT_ID, event)
    await harness.post(xml)
    await harness.post(xml)  # WeCom's retry of the same event
    await harness.settle()
    assert api.texts() == ["欢迎使用 AgentHub"]
    assert harness.submitter.received == []


async def test_allow_list_refuses_others_politely(harness: Harness, api: FakeQyApi) -> None:
    await harness.start(allow_users=["zhangsan"], refusal="抱歉，你没有权限。")
    await harness.post(text("我能用吗", msg_id=1, user="stranger"))
    await harness.post(text("我可以", msg_id=2, user="zhangsan"))
    await harness.settle()
    assert [m.sender_id for m in harness.submitter.received] == ["zhangsan"]
    assert sorted(api.texts()) == sorted(["抱歉，你没有权限。", "echo: 我可以"])
    assert next(s for s in api.sends if s["touser"] == "stranger")["text"]["content"] == "抱歉，你没有权限。"


@pytest.mark.parametrize("locale", ["zh-CN", "en"])
async def test_the_default_refusal_and_unsupported_reply_are_in_the_channels_locale(
    harness: Harness, api: FakeQyApi, locale: str
) -> None:
    harness.locale = None if locale == "zh-CN" else locale  # zh-CN: the default, nothing configured
    await harness.start(allow_users=["zhangsan"])
    await harness.post(text("我能用吗", msg_id=1, user="stranger"))
    await harness.settle()
    location: dict[str, str | int] = {"MsgType": "location", "Location_X": "39.9", "Location_Y": "116.4", "MsgId": 9}
    await harness.post(message_xml(CORP_ID, "zhangsan", AGENT_ID, location))
    await harness.settle()
    unsupported = i18n.text("media.unsupported", locale, kind="location")
    assert api.texts() == [i18n.text("channel.refusal", locale), unsupported]
    assert harness.submitter.received == []


def test_an_unknown_locale_is_a_config_error_naming_the_key(api: FakeQyApi, tmp_path: Path) -> None:
    context = channel_context(ScriptedSubmitter(), tmp_path)
    with pytest.raises(ConfigError, match=r"channels\.wecom\.locale"):
        WeComChannel(context, {**app_table(api), "locale": "fr"})
    assert WeComChannel(context, {**app_table(api), "locale": "en_US.UTF-8"}).config.locale == "en_US.UTF-8"


async def test_error_event_text_is_sent_to_the_user(harness: Harness, api: FakeQyApi) -> None:
    harness.submitter.fail_with = "模型暂时不可用，请稍后再试。"
    await harness.start()
    await harness.post(text("hi"))
    await harness.settle()
    assert api.texts() == ["模型暂时不可用，请稍后再试。"]


async def test_callback_before_start_is_503_so_wecom_retries(api: FakeQyApi, tmp_path: Path) -> None:
    context = channel_context(ScriptedSubmitter(), tmp_path)
    channel = WeComChannel(context, app_table(api))
    server = await serve_routes(context)
    try:
        query, body = signed_callback(text("early"), token=TOKEN, aes_key=AES_KEY, corp_id=CORP_ID)
        async with aiohttp.ClientSession() as http:
            url = server.make_url("/wecom/hr/callback").with_query(query)
            async with http.post(url, data=body) as resp:
                assert resp.status == 503
        assert len(channel.apps["hr"]._dedup) == 0  # the retry will be processed
    finally:
        await channel.stop()
        await server.close()


async def test_bad_secret_at_start_is_logged_without_the_secret(api: FakeQyApi, tmp_path: Path) -> None:
    context = channel_context(ScriptedSubmitter(), tmp_path)
    channel = WeComChannel(context, app_table(api, secret="wrong-secret-xyz"))
    with capture_logs() as logs:
        await channel.start()
    await channel.stop()
    failed = [e for e in logs if e["event"] == "wecom_app_start_failed"]
    assert failed and "40001" in failed[0]["error"] and "corp_id" in failed[0]["error"]
    assert "wrong-secret-xyz" not in repr(logs)


class _NeverAnswers:
    """A gateway that takes every message and never ends its reply: every turn is held mid-flight."""

    accepting = True

    def __init__(self) -> None:
        self.handles: list[ReplyHandle] = []
        self.all_in = asyncio.Event()
        self.expected = 0

    async def submit(self, message: InboundMessage) -> ReplyHandle:
        handle = ReplyHandle(f"helper:wecom:{message.chat_id}")
        self.handles.append(handle)
        if len(self.handles) == self.expected:
            self.all_in.set()
        return handle


async def test_stop_with_many_turns_held_cancels_and_awaits_every_task(api: FakeQyApi, tmp_path: Path) -> None:
    gateway = _NeverAnswers()
    gateway.expected = 20
    table = {**app_table(api), "stop_grace_s": 0}
    context = channel_context(gateway, tmp_path, Settings(channels={"wecom": table}))
    channel = WeComChannel(context, table)
    await channel.start()
    server = await serve_routes(context)
    try:
        async with aiohttp.ClientSession() as http:
            for n in range(20):
                plain = text(f"第{n}条", msg_id=9000 + n, user=f"user{n}")
                query, body = signed_callback(plain, token=TOKEN, aes_key=AES_KEY, corp_id=CORP_ID)
                url = server.make_url("/wecom/hr/callback").with_query(query)
                async with http.post(url, data=body) as resp:
                    assert resp.status == 200
        await gateway.all_in.wait()
        assert len(channel.tasks) == 20  # every reply is being waited for
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            await channel.stop()
            gc.collect()
        assert len(channel.tasks) == 0 and channel.tasks.closed
        assert not [w for w in caught if "destroyed" in str(w.message) or "never awaited" in str(w.message)]
        assert api.sends == []  # nothing half-answered
    finally:
        await server.close()
