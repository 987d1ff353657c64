"""Audit findings on the WeCom channel: lost subscriptions, unacked finish frames, notices, group pushes, mentions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from agenthub import i18n
from agenthub.errors import ConfigError
from agenthub.gateway.handle import ReplyHandle
from agenthub.messages import DeltaEvent, DoneEvent, InboundMessage, NoticeEvent, OutboundMessage, ReplyEvent
from channels.toolkit.notices import with_notices
from channels.wecom import WeComChannel
from channels.wecom.text import strip_mention, utf8_len
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.fakes.wecom import FakeAiBotServer, FakeQyApi, channel_context
from tests.support.wecom import BotHarness, Harness, SteppedGateway, app_table, text

COMPACTED = "上下文较长，已把较早的 40 条消息压缩成摘要。"
THINKING = "正在思考…"


class NoticeGateway:
    """A gateway stand-in whose every reply is a notice, then the answer (`echo: <content>`)."""

    accepting = True

    def __init__(self, notice: str = COMPACTED) -> None:
        self.notice = notice
        self.received: list[InboundMessage] = []

    async def submit(self, message: InboundMessage) -> ReplyHandle:
        self.received.append(message)
        handle = ReplyHandle("helper:wecom:" + message.chat_id)
        answer = f"echo: {message.content}"
        events: list[ReplyEvent] = [NoticeEvent(self.notice), DeltaEvent(answer), DoneEvent(answer)]
        for event in events:
            handle.emit(event)
        return handle


@pytest.fixture
async def bot(server: FakeAiBotServer, tmp_path: Path) -> AsyncIterator[BotHarness]:
    h = BotHarness(server, ScriptedSubmitter(), tmp_path)
    yield h
    if h.channel is not None:
        await h.channel.stop()


def _finished(server: FakeAiBotServer, req_id: str) -> bool:
    return any(s["finish"] for s in server.streams(req_id))


async def _answered(server: FakeAiBotServer, req_id: str) -> None:
    await server.wait_for(lambda: _finished(server, req_id))


# ---------------------------------------------------------------- 1. 846609: the subscription is gone


async def test_a_ping_answered_846609_resubscribes_and_the_next_message_is_answered(
    bot: BotHarness, server: FakeAiBotServer
) -> None:
    with capture_logs() as logs:
        await bot.start(ping_interval_s=0.05)
        server.unsubscribe()  # the socket stays open, but WeCom no longer delivers anything on it
        await server.wait_for(lambda: server.subscribed >= 2, timeout=3)
    assert server.connections == 2
    assert server.sent_on(1, "ping")  # a ping on the old connection found out
    assert any(e["event"] == "wecom_bot_unsubscribed" for e in logs)
    req_id = await server.send_message(server.text_body("还在吗", msgid="unsub-1"))
    await server.wait_for(lambda: _finished(server, req_id))
    assert server.streams(req_id)[-1]["content"] == "echo: 还在吗"


async def test_a_stream_frame_answered_846609_is_sent_again_after_resubscribing(
    stepped: tuple[BotHarness, SteppedGateway], server: FakeAiBotServer
) -> None:
    bot, gateway = stepped
    await bot.start()  # pings every 30 s: the stream frame is what meets the lost subscription
    req_id = await server.send_message(server.text_body("问", msgid="unsub-2"))
    await gateway.steps.put(DeltaEvent("甲。"))
    await server.wait_for(lambda: any(s["content"] == "甲。" for s in server.streams(req_id)))
    server.unsubscribe()
    await gateway.steps.put(DeltaEvent("乙。"))
    await gateway.steps.put(DoneEvent("甲。乙。"))
    await server.wait_for(lambda: any(f["body"]["stream"]["finish"] for f in server.sent_on(2, "aibot_respond_msg")))
    await bot.settle()
    streams = server.streams(req_id)
    assert streams[-1] == {"id": streams[0]["id"], "finish": True, "content": "甲。乙。"}
    assert server.sent("aibot_send_msg") == []  # nothing spilled into follow-up messages
    assert any(f["body"]["stream"]["content"] == "甲。乙。" for f in server.sent_on(1, "aibot_respond_msg"))


# ---------------------------------------------------------------- 2. a finish frame without an ack


async def test_a_finish_frame_whose_ack_is_lost_is_sent_once_more(bot: BotHarness, server: FakeAiBotServer) -> None:
    dropped: list[dict[str, Any]] = []

    def drop_first_finish_ack(frame: dict[str, Any]) -> bool:
        finish = frame.get("cmd") == "aibot_respond_msg" and frame["body"]["stream"]["finish"]
        if finish and not dropped:
            dropped.append(frame)
            return True
        return False

    server.drop_ack = drop_first_finish_ack
    await bot.start(ack_timeout_s=0.3)
    req_id = await server.send_message(server.text_body("结束帧", msgid="fin-1"))
    await server.wait_for(lambda: [s["finish"] for s in server.streams(req_id)].count(True) == 2, timeout=3)
    await bot.settle()
    finishes = [s for s in server.streams(req_id) if s["finish"]]
    assert finishes[0] == finishes[1] == {"id": finishes[0]["id"], "finish": True, "content": "echo: 结束帧"}
    assert server.connections == 1
    assert server.sent("aibot_send_msg") == []


# ---------------------------------------------------------------- 3. notices are never silent


async def test_the_app_reply_carries_the_notices_above_it(api: FakeQyApi, tmp_path: Path) -> None:
    h = Harness(api, ScriptedSubmitter(), tmp_path)
    h.submitter = NoticeGateway()  # type: ignore[assignment]
    try:
        await h.start()
        await h.post(text("总结一下"))
        await h.settle()
    finally:
        await h.stop()
        await h.http.close()
    assert api.texts() == [with_notices("echo: 总结一下", [COMPACTED])]
    assert api.texts()[0].startswith("ℹ️ " + COMPACTED)


async def test_the_bot_stream_shows_a_notice_while_waiting_and_above_the_reply(
    stepped: tuple[BotHarness, SteppedGateway], server: FakeAiBotServer
) -> None:
    bot, gateway = stepped
    queued = "前面还有 1 条消息在处理，稍等。"
    await bot.start()
    req_id = await server.send_message(server.text_body("问", msgid="notice-1"))
    await gateway.steps.put(NoticeEvent(queued))
    waiting = with_notices(THINKING, [queued])
    await server.wait_for(lambda: any(s["content"] == waiting for s in server.streams(req_id)))
    await gateway.steps.put(DeltaEvent("答案。"))
    await gateway.steps.put(DoneEvent("答案。"))
    await server.wait_for(lambda: _finished(server, req_id))
    last = server.streams(req_id)[-1]
    assert last["content"] == with_notices("答案。", [queued])
    assert last["content"].startswith(f"ℹ️ {queued}\n\n")


async def test_notices_do_not_push_a_capped_stream_past_the_cap(server: FakeAiBotServer, tmp_path: Path) -> None:
    long_reply = "".join(f"第{i}句：通知放在回复上方，也不能超过上限。\n" for i in range(120))
    h = BotHarness(server, NoticeGateway(), tmp_path)
    try:
        await h.start(stream_cap_bytes=1024)
        req_id = await server.send_message(server.text_body(long_reply, msgid="notice-cap"))
        await server.wait_for(lambda: _finished(server, req_id))
        await h.settle()
    finally:
        assert h.channel is not None
        await h.channel.stop()
    streams = server.streams(req_id)
    assert all(utf8_len(s["content"]) <= 1024 for s in streams)
    head = with_notices("", [COMPACTED]) + "\n\n"
    assert streams[-1]["content"].startswith(head)
    follow_ups = [f["body"]["markdown"]["content"] for f in server.sent("aibot_send_msg")]
    assert streams[-1]["content"][len(head) :] + "".join(follow_ups) == f"echo: {long_reply}"


# ---------------------------------------------------------------- 4. proactive pushes into groups


async def test_every_push_gets_a_fresh_req_id_into_groups_too(bot: BotHarness, server: FakeAiBotServer) -> None:
    # both official SDKs generate a new req_id for every aibot_send_msg (`generateReqId("aibot_send_msg")`)
    channel = await bot.start()
    callbacks = []
    for n in (1, 2):
        body = server.text_body(f"第{n}条", msgid=f"gp-{n}", user="lisi", chattype="group", chatid="wrkgrp07")
        callbacks.append(await server.send_message(body))
        await _answered(server, callbacks[-1])
    for content in ("三点开会", "四点开会"):
        await channel.send(OutboundMessage(channel="wecom", chat_id="wrkgrp07", content=content, cred_id="team"))
    await channel.send(OutboundMessage(channel="wecom", chat_id="zhangsan", content="单聊", cred_id="team"))
    pushes = server.sent("aibot_send_msg")
    req_ids = [f["headers"]["req_id"] for f in pushes]
    assert len(set(req_ids)) == 3
    assert not set(req_ids) & set(callbacks)
    assert all(r.startswith("aibot_send_msg_") for r in req_ids)
    assert pushes[0]["body"] == {"chatid": "wrkgrp07", "msgtype": "markdown", "markdown": {"content": "三点开会"}}


async def test_pushes_sent_at_the_same_moment_each_get_their_own_req_id(
    bot: BotHarness, server: FakeAiBotServer
) -> None:
    channel = await bot.start()
    body = server.text_body("在吗", msgid="gp-11", user="lisi", chattype="group", chatid="wrkgrp11")
    callback = await server.send_message(body)
    await _answered(server, callback)
    contents = [f"提醒{n}" for n in range(20)]
    sends = [OutboundMessage(channel="wecom", chat_id="wrkgrp11", content=c, cred_id="team") for c in contents]
    await asyncio.gather(*(channel.send(m) for m in sends))
    pushes = server.sent("aibot_send_msg")
    assert sorted(f["body"]["markdown"]["content"] for f in pushes) == sorted(contents)
    req_ids = {f["headers"]["req_id"] for f in pushes}
    assert len(req_ids) == 20 and callback not in req_ids


async def test_a_group_push_needs_no_earlier_message_from_the_group(bot: BotHarness, server: FakeAiBotServer) -> None:
    channel = await bot.start()
    await channel.send(OutboundMessage(channel="wecom", chat_id="wrkgrp08:lisi", content="提醒", cred_id="team"))
    (push,) = server.sent("aibot_send_msg")
    assert push["body"] == {"chatid": "wrkgrp08", "msgtype": "markdown", "markdown": {"content": "提醒"}}


async def test_follow_up_messages_of_a_capped_stream_get_fresh_req_ids(server: FakeAiBotServer, tmp_path: Path) -> None:
    long_reply = "".join(f"第{i}句：超过上限的部分用主动消息发送。\n" for i in range(120))
    h = BotHarness(server, ScriptedSubmitter(reply_for=lambda m: long_reply), tmp_path)
    try:
        await h.start(stream_cap_bytes=1024)
        req_id = await server.send_message(server.text_body("长", msgid="cap-fresh"))
        await server.wait_for(lambda: _finished(server, req_id))
        await h.settle()
    finally:
        assert h.channel is not None
        await h.channel.stop()
    follow_ups = server.sent("aibot_send_msg")
    req_ids = [f["headers"]["req_id"] for f in follow_ups]
    assert len(follow_ups) >= 2
    assert req_id not in req_ids and len(set(req_ids)) == len(req_ids)
    shown = server.streams(req_id)[-1]["content"] + "".join(f["body"]["markdown"]["content"] for f in follow_ups)
    assert shown == long_reply


# ---------------------------------------------------------------- 5. @mentions in groups


def test_with_bot_name_only_the_bots_mention_is_removed() -> None:
    assert strip_mention("@李四 @bot 看看", "bot") == "@李四 看看"
    assert strip_mention("@李四 看看这个", "bot") == "@李四 看看这个"
    assert strip_mention("@bot\u2005/restart", "bot") == "/restart"
    assert strip_mention("@AgentHub /stop", None) == "/stop"  # without bot_name: the leading mention


async def test_a_group_message_keeps_other_peoples_mentions(bot: BotHarness, server: FakeAiBotServer) -> None:
    with capture_logs() as logs:
        await bot.start(bot_name="小助手")
    body = server.text_body("@李四 @小助手 看看", msgid="m-5", user="wangwu", chattype="group", chatid="wrkgrp09")
    req_id = await server.send_message(body)
    await server.wait_for(lambda: _finished(server, req_id))
    assert bot.gateway.received[0].content == "@李四 看看"
    assert not [e for e in logs if e["event"] == "wecom_bot_name_unset"]


async def test_a_bot_without_bot_name_warns_once_at_start(bot: BotHarness, server: FakeAiBotServer) -> None:
    with capture_logs() as logs:
        await bot.start()
        for n in (1, 2):
            body = server.text_body("@AgentHub hi", msgid=f"nb-{n}", chattype="group", chatid="wrkgrp10")
            req_id = await server.send_message(body)
            await _answered(server, req_id)
    warned = [e for e in logs if e["event"] == "wecom_bot_name_unset"]
    assert [e["cred_id"] for e in warned] == ["team"]
    assert "bot_name" in warned[0]["hint"]


# ---------------------------------------------------------------- 6. a pause between the parts of one answer


def chinese(min_bytes: int) -> str:
    out = ""
    i = 0
    while utf8_len(out) < min_bytes:
        out += f"第{i}句：分段发送之间要停一下，客户端才能按顺序显示。\n"
        i += 1
    return out


async def test_parts_of_one_answer_go_out_part_gap_s_apart(harness: Harness, api: FakeQyApi) -> None:
    reply = chinese(5000)
    harness.submitter.reply_for = lambda m: reply
    await harness.start(part_gap_s=0.1)
    await harness.post(text("长文"))
    await harness.settle()
    assert len(api.sends) >= 3
    assert "".join(api.texts()) == reply
    assert all(later - earlier >= 0.099 for earlier, later in pairwise(api.send_times))


def test_part_gap_s_defaults_to_half_a_second_and_rejects_negatives(api: FakeQyApi, tmp_path: Path) -> None:
    context = channel_context(ScriptedSubmitter(), tmp_path)
    table = app_table(api)
    del table["apps"]["hr"]["part_gap_s"]
    assert WeComChannel(context, table).config.apps["hr"].part_gap_s == 0.5
    with pytest.raises(ConfigError, match=r"apps\.hr\.part_gap_s"):
        WeComChannel(context, app_table(api, part_gap_s=-1))


# ---------------------------------------------------------------- 7. a gateway that fails: fixed texts only


LEAK = "password=hunter2 at /srv/agenthub/data"


class FailingGateway:
    """A gateway whose `submit` raises with internal detail in the exception's text."""

    accepting = True

    def __init__(self) -> None:
        self.received: list[InboundMessage] = []

    async def submit(self, message: InboundMessage) -> ReplyHandle:
        self.received.append(message)
        raise RuntimeError(f"inbox write failed: {LEAK}")


async def test_a_bot_message_whose_submit_fails_gets_a_fixed_answer(server: FakeAiBotServer, tmp_path: Path) -> None:
    h = BotHarness(server, FailingGateway(), tmp_path)
    try:
        await h.start()
        with capture_logs() as logs:
            req_id = await server.send_message(server.text_body("你好", msgid="fail-1"))
            await server.wait_for(lambda: _finished(server, req_id))
            await h.settle()
    finally:
        assert h.channel is not None
        await h.channel.stop()
    (last,) = [s for s in server.streams(req_id) if s["finish"]]
    assert last["content"] == i18n.text("channel.submit_failed", "zh-CN")
    assert all("hunter2" not in f["body"]["stream"]["content"] for f in server.sent("aibot_respond_msg"))
    assert any(e["event"] == "wecom_bot_submit_failed" for e in logs)


async def test_an_app_message_whose_submit_fails_gets_a_fixed_answer(api: FakeQyApi, tmp_path: Path) -> None:
    h = Harness(api, ScriptedSubmitter(), tmp_path)
    h.submitter = FailingGateway()  # type: ignore[assignment]
    try:
        await h.start()
        with capture_logs() as logs:
            status, body = await h.post(text("你好"))
            await h.settle()
    finally:
        await h.stop()
        await h.http.close()
    assert (status, body) == (200, "")
    assert api.texts() == [i18n.text("channel.submit_failed", "zh-CN")]
    assert any(e["event"] == "wecom_app_submit_failed" for e in logs)
