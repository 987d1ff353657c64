"""Outbound WeCom app messages: byte splitting, the token cache, errcodes, markdown, proactive sends, config."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from agenthub.errors import ChannelSendError, ConfigError
from agenthub.messages import OutboundMessage
from channels.wecom import WeComChannel
from channels.wecom.api import WorkApi, WorkApiError
from channels.wecom.config import load_config
from channels.wecom.text import split_utf8, strip_markdown, strip_mention, utf8_len
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.fakes.wecom import FakeQyApi, channel_context
from tests.support.wecom import AES_KEY, CORP_ID, SECRET, Harness, app_table, text


def chinese_reply(min_bytes: int) -> str:
    sentences: list[str] = []
    i = 0
    while utf8_len("".join(sentences)) < min_bytes:
        sentences.append(f"第{i}句：企业微信的文本消息最长两千零四十八个字节，超出部分会被静默截断。")
        if i % 7 == 6:
            sentences.append("\n")
        i += 1
    return "".join(sentences)


async def test_a_5000_byte_chinese_reply_arrives_in_ordered_parts(harness: Harness, api: FakeQyApi) -> None:
    reply = chinese_reply(5000)
    harness.submitter.reply_for = lambda m: reply
    await harness.start()
    await harness.post(text("写一篇长文"))
    await harness.settle()
    parts = api.texts()
    assert len(parts) >= 3
    assert all(utf8_len(p) <= 2048 for p in parts)
    assert "".join(parts) == reply
    assert all(p.endswith(("。", "\n")) for p in parts[:-1])  # cut at sentence or line breaks


@given(st.text(alphabet=st.sampled_from(list("企业微信a。\n😀 .")), max_size=3000), st.integers(4, 700))
def test_split_utf8_never_exceeds_the_limit_and_loses_nothing(value: str, limit: int) -> None:
    parts = split_utf8(value, limit)
    assert "".join(parts) == value
    assert all(0 < utf8_len(p) <= limit for p in parts)


def test_text_helpers() -> None:
    assert strip_markdown("# 标题\n**粗体** 和 `code`\n- 项目\n[链接](http://x.cn)") == (
        "标题\n粗体 和 code\n• 项目\n链接 (http://x.cn)"
    )
    assert strip_mention("@小助手 /restart", "小助手") == "/restart"
    assert strip_mention("@AgentHub  /stop", None) == "/stop"
    assert strip_mention("没有提及", None) == "没有提及"


async def test_42001_leads_to_one_refetch_and_a_successful_resend(harness: Harness, api: FakeQyApi) -> None:
    await harness.start(sender_names=False)  # the sender's name lookup would meet the expired token first
    assert len(api.tokens_issued) == 1  # checked at start
    api.expire_tokens()
    await harness.post(text("token 过期了"))
    await harness.settle()
    assert len(api.tokens_issued) == 2
    assert [token for token, _ in api.attempts] == api.tokens_issued
    assert api.texts() == ["echo: token 过期了"]


async def test_token_is_cached_across_sends(harness: Harness, api: FakeQyApi) -> None:
    await harness.start()
    for i in range(3):
        await harness.post(text(f"q{i}", msg_id=100 + i))
    await harness.settle()
    assert len(api.sends) == 3
    assert len(api.tokens_issued) == 1


async def test_token_is_refetched_when_it_expires_by_the_clock(api: FakeQyApi) -> None:
    now = [1000.0]
    async with aiohttp.ClientSession() as session:
        work = WorkApi(session, base_url=api.url, corp_id=CORP_ID, secret=SECRET, cred_id="hr", clock=lambda: now[0])
        first = await work.token()
        now[0] += 6000
        assert await work.token() == first
        now[0] += 1000  # within 5 minutes of the 7200 s expiry
        assert await work.token() != first
    assert len(api.tokens_issued) == 2


async def test_rate_limit_backs_off_then_delivers(api: FakeQyApi) -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    api.send_errcodes = [45009, 45009]
    async with aiohttp.ClientSession() as session:
        work = WorkApi(
            session,
            base_url=api.url,
            corp_id=CORP_ID,
            secret=SECRET,
            cred_id="hr",
            rate_limit_backoff_s=2.0,
            sleep=sleep,
        )
        await work.send_message({"touser": "a", "agentid": 1, "msgtype": "text", "text": {"content": "hi"}})
    assert slept == [2.0, 4.0]
    assert len(api.sends) == 1


async def test_60020_is_not_retried_and_is_logged_with_a_hint(harness: Harness, api: FakeQyApi) -> None:
    await harness.start(sender_names=False)  # only `message/send` answers here
    api.send_errcodes = [60020]
    with capture_logs() as logs:
        await harness.post(text("hi"))
        await harness.settle()
    assert len(api.attempts) == 1
    errcode_logs = [e for e in logs if e["event"] == "wecom_api_errcode"]
    assert errcode_logs[0]["errcode"] == 60020
    assert "trusted IP" in errcode_logs[0]["hint"]
    failed = next(e for e in logs if e["event"] == "wecom_reply_failed")
    assert failed["errcode"] == 60020
    assert all(t not in repr(logs) for t in api.tokens_issued)  # the token never reaches the logs


async def test_other_errcodes_raise_with_the_errmsg(api: FakeQyApi) -> None:
    api.send_errcodes = [44004]
    async with aiohttp.ClientSession() as session:
        work = WorkApi(session, base_url=api.url, corp_id=CORP_ID, secret=SECRET, cred_id="hr")
        with pytest.raises(WorkApiError) as info:
            await work.send_message({"touser": "a", "agentid": 1, "msgtype": "text", "text": {"content": ""}})
    assert info.value.errcode == 44004
    assert "injected 44004" in str(info.value)


async def test_unreachable_api_raises_channel_send_error_within_the_timeout() -> None:
    async with aiohttp.ClientSession() as session:
        work = WorkApi(session, base_url="http://127.0.0.1:9", corp_id=CORP_ID, secret=SECRET, cred_id="x", timeout_s=2)
        with pytest.raises(ChannelSendError):
            await work.token()


async def test_markdown_option_sends_markdown(harness: Harness, api: FakeQyApi) -> None:
    harness.submitter.reply_for = lambda m: "**重点**：完成"
    await harness.start(markdown=True)
    await harness.post(text("md"))
    await harness.settle()
    assert api.sends[0]["msgtype"] == "markdown"
    assert api.sends[0]["markdown"]["content"] == "**重点**：完成"


async def test_text_replies_have_markdown_stripped_by_default(harness: Harness, api: FakeQyApi) -> None:
    harness.submitter.reply_for = lambda m: "**重点**：完成"
    await harness.start()
    await harness.post(text("md"))
    await harness.settle()
    assert api.texts() == ["重点：完成"]


async def test_very_long_answers_are_capped_with_a_clear_note(harness: Harness, api: FakeQyApi) -> None:
    harness.submitter.reply_for = lambda m: chinese_reply(20000)
    await harness.start(max_parts=3)
    await harness.post(text("超长"))
    await harness.settle()
    assert len(api.sends) == 3
    assert "回复过长" in api.texts()[-1]


async def test_proactive_send_uses_message_send(harness: Harness, api: FakeQyApi) -> None:
    channel = await harness.start()
    await channel.send(OutboundMessage(channel="wecom", chat_id="zhangsan", content="提醒：三点开会", cred_id="hr"))
    await channel.send(OutboundMessage(channel="wecom", chat_id="lisi", content="只有一个应用时可省略 cred_id"))
    assert [s["touser"] for s in api.sends] == ["zhangsan", "lisi"]
    with pytest.raises(ChannelSendError):
        await channel.send(OutboundMessage(channel="wecom", chat_id="x", content="y", cred_id="nope"))
    api.send_errcodes = [60020]
    with pytest.raises(WorkApiError):
        await channel.send(OutboundMessage(channel="wecom", chat_id="x", content="y", cred_id="hr"))


def test_bad_config_names_the_key_not_the_value(api: FakeQyApi, tmp_path: Path) -> None:
    context = channel_context(ScriptedSubmitter(), tmp_path)
    bad_key = "not-a-valid-aes-key-SECRETVALUE"
    with pytest.raises(ConfigError) as info:
        WeComChannel(context, app_table(api, encoding_aes_key=bad_key))
    assert "channels.wecom.apps.hr.encoding_aes_key" in str(info.value)
    assert bad_key not in str(info.value)
    table = app_table(api)
    del table["apps"]["hr"]["secret"]
    with pytest.raises(ConfigError, match=r"apps\.hr\.secret"):
        WeComChannel(context, table)
    with pytest.raises(ConfigError, match="cred_id"):
        WeComChannel(context, {**app_table(api), "bots": {"hr": {"bot_id": "b", "secret": "s"}}})
    assert AES_KEY  # the valid key is accepted by the other tests


def test_secrets_from_the_environment_merge_with_the_toml_table(
    api: FakeQyApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agenthub.config import load_settings

    toml = tmp_path / "agenthub.toml"
    toml.write_text(
        f'[channels.wecom.apps.hr]\ncorp_id = "{CORP_ID}"\nagent_id = 1000002\nagent = "helper"\n', encoding="utf-8"
    )
    monkeypatch.setenv("AGENTHUB_CHANNELS__WECOM__APPS__HR__SECRET", SECRET)
    monkeypatch.setenv("AGENTHUB_CHANNELS__WECOM__APPS__HR__TOKEN", "tok")
    monkeypatch.setenv("AGENTHUB_CHANNELS__WECOM__APPS__HR__ENCODING_AES_KEY", AES_KEY)
    settings = load_settings(toml)
    channel = WeComChannel(channel_context(ScriptedSubmitter(), tmp_path), settings.channels["wecom"])
    app = channel.config.apps["hr"]
    assert (app.corp_id, app.agent, app.secret.get_secret_value()) == (CORP_ID, "helper", SECRET)
    assert SECRET not in repr(channel.config)


@pytest.mark.parametrize("key", ["dedup_ttl_s", "apps.hr.request_timeout_s", "apps.hr.rate_limit_backoff_s"])
def test_a_float_that_is_not_finite_is_refused_naming_the_key(api: FakeQyApi, key: str) -> None:
    table = app_table(api)
    *path, name = key.split(".")
    section = table
    for part in path:
        section = section[part]
    section[name] = float("inf")
    with pytest.raises(ConfigError, match=rf"^invalid configuration: channels\.wecom\.{key}: .*finite"):
        load_config(table)
