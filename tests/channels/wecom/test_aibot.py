"""AI bot long connection against a fake WeCom websocket: streams, keepalives, caps, dedup, reconnects, groups."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agenthub import i18n
from agenthub.gateway.handle import ReplyHandle
from agenthub.messages import DeltaEvent, DoneEvent, InboundMessage, OutboundMessage, ToolEvent
from channels.wecom import WeComChannel
from channels.wecom.text import utf8_len
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.fakes.wecom import FakeAiBotServer, channel_context
from tests.support.wecom import BOT_ID, BOT_SECRET, BotHarness, bot_table


@pytest.fixture
async def submitter() -> ScriptedSubmitter:
    return ScriptedSubmitter(chunks=5, delay_s=0.1)


@pytest.fixture
async def bot(server: FakeAiBotServer, submitter: ScriptedSubmitter, tmp_path: Path) -> AsyncIterator[BotHarness]:
    h = BotHarness(server, submitter, tmp_path)
    yield h
    if h.channel is not None:
        await h.channel.stop()


async def test_subscribe_sends_what_the_official_sdks_send(bot: BotHarness, server: FakeAiBotServer) -> None:
    # both SDKs: {cmd: "aibot_subscribe", headers: {req_id: generateReqId("aibot_subscribe")}, body: {bot_id, secret}}
    await bot.start()
    (frame,) = server.sent("aibot_subscribe")
    assert frame["body"] == {"bot_id": BOT_ID, "secret": BOT_SECRET}
    assert re.fullmatch(r"aibot_subscribe_\d{13}_[0-9a-f]{8}", frame["headers"]["req_id"])


async def test_a_callback_streams_growing_content_then_finishes(bot: BotHarness, server: FakeAiBotServer) -> None:
    await bot.start()
    req_id = await server.send_message(server.text_body("介绍一下企业微信的智能机器人", msgid="m-1"))
    await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
    streams = server.streams(req_id)
    growing = [s["content"] for s in streams[:-1] if s["content"] != "正在思考…"]
    assert len(growing) >= 3
    assert all(a != b and b.startswith(a) for a, b in itertools.pairwise(growing))
    assert streams[-1]["content"] == "echo: 介绍一下企业微信的智能机器人"
    assert streams[-1]["content"].startswith(growing[-1])
    assert [s["finish"] for s in streams] == [False] * (len(streams) - 1) + [True]
    assert len({s["id"] for s in streams}) == 1
    assert all(f["headers"]["req_id"] == req_id for f in server.sent("aibot_respond_msg"))
    message = bot.gateway.received[0]
    assert (message.chat_id, message.sender_id, message.message_id) == ("zhangsan", "zhangsan", "m-1")
    assert (message.agent, message.cred_id, message.metadata["chat_type"]) == ("helper", "team", "private")


async def test_a_slow_turn_gets_keepalive_frames(
    bot: BotHarness, server: FakeAiBotServer, submitter: ScriptedSubmitter
) -> None:
    submitter.chunks, submitter.delay_s = 1, 0.5  # silence before the answer
    await bot.start(keepalive_s=0.1)
    req_id = await server.send_message(server.text_body("需要很久的任务", msgid="m-slow"))
    await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
    thinking = [s for s in server.streams(req_id) if s["content"] == "正在思考…" and not s["finish"]]
    assert len(thinking) >= 3  # the first update plus refreshes while nothing changed
    assert server.streams(req_id)[-1] == {
        "id": thinking[0]["id"],
        "finish": True,
        "content": "echo: 需要很久的任务",
    }


async def test_a_duplicate_msgid_is_ignored(bot: BotHarness, server: FakeAiBotServer) -> None:
    await bot.start()
    body = server.text_body("只回答一次", msgid="m-dup")
    first = await server.send_message(body)
    second = await server.send_message(body)
    await server.wait_for(lambda: any(s["finish"] for s in server.streams(first)))
    await bot.settle()
    assert len(bot.gateway.received) == 1
    assert server.streams(second) == []


async def test_a_dropped_connection_reconnects_and_goes_on(bot: BotHarness, server: FakeAiBotServer) -> None:
    await bot.start()
    await server.drop()
    await server.wait_for(lambda: server.subscribed == 2)
    req_id = await server.send_message(server.text_body("断线之后", msgid="m-after"))
    await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
    assert server.streams(req_id)[-1]["content"] == "echo: 断线之后"


async def test_disconnected_event_stops_reconnecting(bot: BotHarness, server: FakeAiBotServer) -> None:
    channel = await bot.start()
    with capture_logs() as logs:
        await server.send_event("disconnected_event")
        conn = channel.bots["team"].conn
        assert conn is not None
        async with asyncio.timeout(2):
            await conn.wait_finished()
    assert conn.replaced
    assert server.connections == 1
    assert any(e["event"] == "wecom_bot_replaced" for e in logs)


async def test_two_missed_ping_acks_mean_a_dead_connection(bot: BotHarness, server: FakeAiBotServer) -> None:
    server.unanswered.add("ping")
    await bot.start(ping_interval_s=0.05, ack_timeout_s=0.05)
    await server.wait_for(lambda: server.connections >= 2, timeout=5)
    assert len(server.sent("ping")) >= 2


async def test_ping_acks_with_an_error_count_as_missed(bot: BotHarness, server: FakeAiBotServer) -> None:
    # the SDKs reset their missed-pong count only on an ack with errcode 0
    server.ack_rule = lambda frame: 50001 if frame.get("cmd") == "ping" else None
    await bot.start(ping_interval_s=0.05)
    await server.wait_for(lambda: server.connections >= 2, timeout=5)
    assert len(server.sent_on(1, "ping")) == 2


async def test_a_ping_ack_may_come_any_time_before_the_next_ping(bot: BotHarness, server: FakeAiBotServer) -> None:
    # the SDKs count a ping as missed only when no ack came by the next ping, not after the reply-ack timeout
    server.ack_delay_s["ping"] = 0.2
    await bot.start(ping_interval_s=1.0, ack_timeout_s=0.05)
    await server.wait_for(lambda: len(server.sent("ping")) >= 3, timeout=10)
    assert server.connections == 1


async def test_pings_are_sent_on_the_interval(bot: BotHarness, server: FakeAiBotServer) -> None:
    await bot.start(ping_interval_s=0.05)
    await server.wait_for(lambda: len(server.sent("ping")) >= 3)
    assert server.connections == 1


async def test_a_bad_secret_is_reported_and_retried_without_raising(server: FakeAiBotServer, tmp_path: Path) -> None:
    channel = WeComChannel(channel_context(ScriptedSubmitter(), tmp_path), bot_table(server, secret="wrong-one"))
    with capture_logs() as logs:
        await channel.start()
        await server.wait_for(lambda: len(server.sent("aibot_subscribe")) >= 2)
    await channel.stop()
    assert server.subscribed == 0
    failed = [e for e in logs if e["event"] == "wecom_bot_subscribe_failed"]
    assert failed and failed[0]["errcode"] == 40001
    assert "wrong-one" not in repr(logs)


async def test_a_group_mention_is_stripped_before_routing(bot: BotHarness, server: FakeAiBotServer) -> None:
    await bot.start(bot_name="小助手")
    body = server.text_body("@小助手 /restart", msgid="g-1", user="lisi", chattype="group", chatid="wrkgrp01")
    req_id = await server.send_message(body)
    await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
    message = bot.gateway.received[0]
    assert message.content == "/restart"
    assert (message.chat_id, message.sender_id) == ("wrkgrp01", "lisi")
    inbox_id = message.metadata["inbox_id"]  # the stored callback this turn answers
    assert message.metadata == {"chat_type": "group", "mode": "aibot", "group_id": "wrkgrp01", "inbox_id": inbox_id}


async def test_one_session_per_group_member_option(bot: BotHarness, server: FakeAiBotServer) -> None:
    await bot.start(session_per_member=True)
    body = server.text_body("@AgentHub 你好", msgid="g-2", user="lisi", chattype="group", chatid="wrkgrp01")
    req_id = await server.send_message(body)
    await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
    assert bot.gateway.received[0].chat_id == "wrkgrp01:lisi"
    assert bot.gateway.received[0].content == "你好"


async def test_allow_list_refusal_never_reaches_the_agent(bot: BotHarness, server: FakeAiBotServer) -> None:
    await bot.start(allow_users=["zhangsan"], refusal="抱歉，你没有权限。")
    req_id = await server.send_message(server.text_body("hi", msgid="r-1", user="intruder"))
    await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
    assert server.streams(req_id)[-1]["content"] == "抱歉，你没有权限。"
    assert bot.gateway.received == []


async def test_unsupported_types_get_a_clear_reply(bot: BotHarness, server: FakeAiBotServer) -> None:
    await bot.start()
    body = {"msgid": "i-1", "chattype": "single", "from": {"userid": "a"}, "msgtype": "video", "video": {"url": "u"}}
    req_id = await server.send_message(body)
    await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
    assert server.streams(req_id)[-1]["content"] == i18n.text("media.unsupported", "zh-CN", kind="video")
    assert bot.gateway.received == []


async def test_enter_chat_gets_the_welcome(bot: BotHarness, server: FakeAiBotServer) -> None:
    await bot.start(welcome="你好，我是 AgentHub")
    req_id = await server.send_event("enter_chat", **{"from": {"userid": "a"}})
    await server.wait_for(lambda: bool(server.sent("aibot_respond_welcome_msg", req_id)))
    body = server.sent("aibot_respond_welcome_msg", req_id)[0]["body"]
    assert body == {"msgtype": "text", "text": {"content": "你好，我是 AgentHub"}}


async def test_a_reply_past_20480_bytes_continues_in_new_messages(
    bot: BotHarness, server: FakeAiBotServer, submitter: ScriptedSubmitter
) -> None:
    long_reply = "".join(f"第{i}段：智能机器人的流式消息最多两万零四百八十字节。\n" for i in range(700))
    assert utf8_len(long_reply) > 40000
    submitter.reply_for = lambda m: long_reply
    submitter.chunks, submitter.delay_s = 20, 0.01
    await bot.start()
    req_id = await server.send_message(server.text_body("长文", msgid="long-1"))
    await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
    await bot.settle()
    streams = server.streams(req_id)
    assert all(utf8_len(s["content"]) <= 20480 for s in streams)
    assert [s["finish"] for s in streams].count(True) == 1
    follow_ups = [f["body"] for f in server.sent("aibot_send_msg")]
    assert follow_ups and all(b["chatid"] == "zhangsan" and b["msgtype"] == "markdown" for b in follow_ups)
    assert all(utf8_len(b["markdown"]["content"]) <= 20480 for b in follow_ups)
    shown = streams[-1]["content"] + "".join(b["markdown"]["content"] for b in follow_ups)
    assert shown == long_reply


async def test_an_expired_stream_continues_in_a_new_message(bot: BotHarness, server: FakeAiBotServer) -> None:
    server.ack_errcodes["aibot_respond_msg"] = [0, 0, 846608, 846608, 846608, 846608, 846608, 846608]
    await bot.start()
    req_id = await server.send_message(server.text_body("一二三四五六七八九十", msgid="exp-1"))
    await server.wait_for(lambda: bool(server.sent("aibot_send_msg")))
    await bot.settle()
    accepted = [s["content"] for s in server.streams(req_id)[:2]]
    follow_up = server.sent("aibot_send_msg")[-1]["body"]["markdown"]["content"]
    shown = accepted[-1] if accepted[-1] != "正在思考…" else ""
    assert shown + follow_up == "echo: 一二三四五六七八九十"


async def test_proactive_send_uses_aibot_send_msg(bot: BotHarness, server: FakeAiBotServer) -> None:
    channel = await bot.start()
    body = server.text_body("@AgentHub 你好", msgid="p-1", user="lisi", chattype="group", chatid="wrkgrp01")
    req_id = await server.send_message(body)  # a group push needs an earlier message from the group
    await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
    await channel.send(OutboundMessage(channel="wecom", chat_id="wrkgrp01:lisi", content="提醒", cred_id="team"))
    await channel.send(OutboundMessage(channel="wecom", chat_id="zhangsan", content="单聊提醒", cred_id="team"))
    group, single = (f["body"] for f in server.sent("aibot_send_msg"))
    assert group == {"chatid": "wrkgrp01", "msgtype": "markdown", "markdown": {"content": "提醒"}}
    assert single == {"chatid": "zhangsan", "msgtype": "markdown", "markdown": {"content": "单聊提醒"}}


class ToolRunGateway:
    """A gateway whose turn runs a long silent tool call before answering."""

    accepting = True

    def __init__(self, silence: asyncio.Event) -> None:
        self.silence = silence
        self.received: list[InboundMessage] = []
        self.tasks: list[asyncio.Task[None]] = []

    async def submit(self, message: InboundMessage) -> ReplyHandle:
        self.received.append(message)
        handle = ReplyHandle("helper:wecom:" + message.chat_id)
        handle.emit(DeltaEvent("先查一下资料。"))
        handle.emit(ToolEvent("search", "start"))

        async def finish() -> None:
            await self.silence.wait()
            handle.emit(ToolEvent("search", "end"))
            handle.emit(DoneEvent("先查一下资料。查到了。"))

        self.tasks.append(asyncio.create_task(finish()))
        return handle


async def test_a_long_tool_run_keeps_the_stream_alive(server: FakeAiBotServer, tmp_path: Path) -> None:
    silence = asyncio.Event()
    gateway = ToolRunGateway(silence)
    h = BotHarness(server, gateway, tmp_path)
    await h.start(keepalive_s=0.1)
    try:
        req_id = await server.send_message(server.text_body("查资料", msgid="tool-1"))
        await server.wait_for(lambda: len([s for s in server.streams(req_id) if s["content"] == "先查一下资料。"]) >= 4)
        silence.set()
        await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
        assert server.streams(req_id)[-1]["content"] == "先查一下资料。查到了。"
    finally:
        assert h.channel is not None
        await h.channel.stop()


async def test_a_command_conflict_is_retried(bot: BotHarness, server: FakeAiBotServer) -> None:
    server.ack_errcodes["aibot_respond_msg"] = [6000]
    await bot.start()
    req_id = await server.send_message(server.text_body("冲突", msgid="c-1"))
    await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
    streams = server.streams(req_id)
    assert streams[0] == streams[1]  # the conflicted frame was sent again
    assert streams[-1]["content"] == "echo: 冲突"


async def test_an_aborted_turn_still_finishes_the_stream(
    bot: BotHarness, server: FakeAiBotServer, submitter: ScriptedSubmitter
) -> None:
    submitter.fail_with = "已停止当前回复。"
    await bot.start()
    req_id = await server.send_message(server.text_body("写首诗", msgid="s-1"))
    await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
    streams = server.streams(req_id)
    assert streams[-1] == {"id": streams[0]["id"], "finish": True, "content": "已停止当前回复。"}


async def test_stop_during_a_slow_turn_returns_promptly(server: FakeAiBotServer, tmp_path: Path) -> None:
    slow = ScriptedSubmitter(chunks=1, delay_s=30)
    table = {**bot_table(server), "stop_grace_s": 0.1}
    channel = WeComChannel(channel_context(slow, tmp_path), table)
    await channel.start()
    req_id = await server.send_message(server.text_body("慢", msgid="slow-stop"))
    await server.wait_for(lambda: bool(server.streams(req_id)))
    async with asyncio.timeout(3):
        await channel.stop()
        await channel.stop()  # idempotent
    assert len(channel.tasks) == 0
    conn = channel.bots["team"].conn
    assert conn is not None
    async with asyncio.timeout(1):
        await conn.wait_finished()


async def test_a_frame_with_raw_control_characters_is_parsed_and_answered(
    bot: BotHarness, server: FakeAiBotServer
) -> None:
    # WeCom puts some control characters raw into user text; the Node SDK strips [\x00-\x08\x0B-\x0D\x0E-\x1F]
    # before parsing (tab and newline stay)
    await bot.start()
    body = server.text_body("甲\x01乙\r\n丙\t丁\x0b\x0c\x1f", msgid="ctl-1")
    with capture_logs() as logs:
        req_id = await server.send_message(body, raw_controls=True)
        await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
    assert bot.gateway.received[0].content == "甲乙\n丙\t丁"
    assert server.streams(req_id)[-1]["content"] == "echo: 甲乙\n丙\t丁"
    assert not [e for e in logs if e["event"] == "wecom_bot_bad_frame"]


async def test_a_raw_tab_or_newline_inside_a_string_does_not_drop_the_frame(
    bot: BotHarness, server: FakeAiBotServer
) -> None:
    await bot.start()
    body = server.text_body("甲\t乙\n丙", msgid="ws-1")
    frame = {"cmd": "aibot_msg_callback", "headers": {"req_id": "cb-ws"}, "body": body}
    await server.push_text(json.dumps(frame, ensure_ascii=False).replace("\\t", "\t").replace("\\n", "\n"))
    await server.wait_for(lambda: any(s["finish"] for s in server.streams("cb-ws")))
    assert bot.gateway.received[0].content == "甲\t乙\n丙"


async def test_a_binary_frame_is_parsed_like_a_text_frame(bot: BotHarness, server: FakeAiBotServer) -> None:
    await bot.start()
    req_id = await server.send_message(server.text_body("二进制帧", msgid="bin-1"), binary=True)
    await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
    assert server.streams(req_id)[-1]["content"] == "echo: 二进制帧"


def test_the_reply_ack_timeout_defaults_to_the_official_sdks_5_s(server: FakeAiBotServer, tmp_path: Path) -> None:
    table = bot_table(server)
    del table["bots"]["team"]["ack_timeout_s"]
    channel = WeComChannel(channel_context(ScriptedSubmitter(), tmp_path), table)
    assert channel.config.bots["team"].ack_timeout_s == 5.0  # replyAckTimeout = 5000 ms in both SDKs


@pytest.mark.parametrize("ack_cmd", ["", "aibot_respond_msg"])
async def test_acks_that_carry_a_cmd_are_still_acks(bot: BotHarness, server: FakeAiBotServer, ack_cmd: str) -> None:
    # the SDKs treat every frame that is not a callback as an ack, matched by req_id; their WsFrame says an ack's
    # cmd "may be empty"
    server.ack_cmd = ack_cmd
    channel = await bot.start()
    req_id = await server.send_message(server.text_body("有 cmd 的回执", msgid=f"ack-{ack_cmd}"))
    await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
    await channel.send(OutboundMessage(channel="wecom", chat_id="zhangsan", content="提醒", cred_id="team"))
    assert server.streams(req_id)[-1]["content"] == "echo: 有 cmd 的回执"
    assert server.connections == 1


async def test_a_frame_nested_deeper_than_the_parser_goes_is_dropped_and_the_connection_goes_on(
    bot: BotHarness, server: FakeAiBotServer
) -> None:
    await bot.start()
    with capture_logs() as logs:
        await server.push_text("[" * 100_000)
        req_id = await server.send_message(server.text_body("之后", msgid="after-deep"))
        await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
    assert server.streams(req_id)[-1]["content"] == "echo: 之后"
    assert [e["event"] for e in logs if e["event"] == "wecom_bot_bad_frame"] == ["wecom_bot_bad_frame"]
    assert server.subscribed == 1  # the same connection read on: no reconnect
