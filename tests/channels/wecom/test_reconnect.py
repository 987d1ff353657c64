"""AI-bot connection failures: reconnect backoff on a flapping server, sends racing a drop, redelivered events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from agenthub.errors import ChannelSendError
from agenthub.messages import DeltaEvent, DoneEvent, OutboundMessage
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.fakes.wecom import FakeAiBotServer
from tests.support.wecom import BotHarness, SteppedGateway


@pytest.fixture
async def bot(server: FakeAiBotServer, tmp_path: Path) -> AsyncIterator[BotHarness]:
    h = BotHarness(server, ScriptedSubmitter(), tmp_path)
    yield h
    if h.channel is not None:
        await h.channel.stop()


# ---------------------------------------------------------------- backoff on a server that drops after subscribe


def _gaps(server: FakeAiBotServer) -> list[float]:
    return [b - a for a, b in pairwise(server.connect_times)]


async def test_a_server_dropping_right_after_the_subscribe_ack_gets_growing_delays(
    bot: BotHarness, server: FakeAiBotServer
) -> None:
    server.drop_after_subscribe = 100
    await bot.start(reconnect_min_s=0.05, reconnect_max_s=2.0)
    await server.wait_for(lambda: server.subscribed >= 4)  # every attempt subscribes, then is dropped at once
    gaps = _gaps(server)[:3]  # nominally 0.1, 0.2, 0.4 s (+ up to 25 % jitter)
    assert all(later > earlier * 1.3 for earlier, later in pairwise(gaps)), gaps


async def test_a_connection_that_stayed_up_resets_the_backoff(bot: BotHarness, server: FakeAiBotServer) -> None:
    server.drop_after_subscribe = 3  # the fourth connection stays up (after a ~0.4 s backoff)
    await bot.start(reconnect_min_s=0.05, reconnect_max_s=2.0, reconnect_stable_s=0.2, ping_interval_s=0.05)
    await server.wait_for(lambda: server.subscribed >= 4)
    await server.wait_for(lambda: len(server.sent_on(4, "ping")) >= 5)  # up for >= 0.25 s: longer than stable_s
    dropped_at = asyncio.get_running_loop().time()
    await server.drop()
    await server.wait_for(lambda: server.connections >= 5)
    assert server.connect_times[4] - dropped_at < 0.3  # back to reconnect_min_s, not 0.8 s


# ---------------------------------------------------------------- sends racing a dropped connection


def _drop_first_finish(frame: dict[str, Any], seen: list[int]) -> bool:
    if frame.get("cmd") != "aibot_respond_msg" or not frame["body"]["stream"]["finish"] or seen:
        return False
    seen.append(1)
    return True


async def test_a_stream_whose_finish_frame_is_lost_with_the_connection_finishes_on_the_next_one(
    stepped: tuple[BotHarness, SteppedGateway], server: FakeAiBotServer
) -> None:
    bot, gateway = stepped
    seen: list[int] = []
    server.drop_on = lambda frame: _drop_first_finish(frame, seen)
    await bot.start()
    req_id = await server.send_message(server.text_body("问", msgid="race-1"))
    await gateway.steps.put(DeltaEvent("第一段。"))
    await server.wait_for(lambda: any(s["content"] == "第一段。" for s in server.streams(req_id)))
    await gateway.steps.put(DeltaEvent("第二段。"))
    await gateway.steps.put(DoneEvent("第一段。第二段。"))
    await server.wait_for(lambda: bool(server.sent_on(2, "aibot_respond_msg")))
    await bot.settle()
    on_new = [f["body"]["stream"] for f in server.sent_on(2, "aibot_respond_msg")]
    assert on_new[-1]["finish"] is True
    assert on_new[-1]["content"] == "第一段。第二段。"
    assert {s["id"] for s in server.streams(req_id)} == {on_new[-1]["id"]}
    assert all(f["headers"]["req_id"] == req_id for f in server.sent_on(2, "aibot_respond_msg"))
    assert server.sent("aibot_send_msg") == []  # nothing spilled into follow-up messages


async def test_stream_updates_sent_while_reconnecting_wait_for_the_new_connection(
    stepped: tuple[BotHarness, SteppedGateway], server: FakeAiBotServer
) -> None:
    bot, gateway = stepped
    await bot.start(reconnect_min_s=0.2, reconnect_max_s=0.4)
    req_id = await server.send_message(server.text_body("问", msgid="race-2"))
    await gateway.steps.put(DeltaEvent("甲。"))
    await server.wait_for(lambda: any(s["content"] == "甲。" for s in server.streams(req_id)))
    with capture_logs() as logs:
        await server.drop()
        await gateway.steps.put(DeltaEvent("乙。"))  # pushed while the client is down or still tearing down
        await gateway.steps.put(DoneEvent("甲。乙。"))
        await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
        await bot.settle()
    assert server.streams(req_id)[-1] == {"id": server.streams(req_id)[0]["id"], "finish": True, "content": "甲。乙。"}
    assert server.sent_on(2, "aibot_respond_msg")
    assert not [e for e in logs if e["event"] == "wecom_bot_respond_failed"]


async def test_a_proactive_message_lost_with_the_connection_is_not_sent_twice(
    bot: BotHarness, server: FakeAiBotServer
) -> None:
    server.drop_on = lambda frame: frame.get("cmd") == "aibot_send_msg"
    channel = await bot.start()
    with capture_logs() as logs, pytest.raises(ChannelSendError, match="may or may not"):
        await channel.send(OutboundMessage(channel="wecom", chat_id="zhangsan", content="提醒", cred_id="team"))
    server.drop_on = None
    await server.wait_for(lambda: server.subscribed >= 2)
    await channel.send(OutboundMessage(channel="wecom", chat_id="zhangsan", content="第二条", cred_id="team"))
    contents = [f["body"]["markdown"]["content"] for f in server.sent("aibot_send_msg")]
    assert contents == ["提醒", "第二条"]  # the first one was not resent on the new connection
    lost = [e for e in logs if e["event"] == "wecom_bot_send_outcome_unknown"]
    assert lost and lost[0]["cmd"] == "aibot_send_msg"


# ---------------------------------------------------------------- redelivered events


async def test_a_redelivered_enter_chat_gets_one_welcome(bot: BotHarness, server: FakeAiBotServer) -> None:
    await bot.start(welcome="欢迎")
    user = {"from": {"userid": "zhangsan"}}
    first = await server.send_event("enter_chat", msgid="ev-1", **user)
    again = await server.send_event("enter_chat", msgid="ev-1", **user)  # same msgid, new req_id
    no_msgid = {"cmd": "aibot_event_callback", "headers": {"req_id": "ev-plain"}}
    frame = {**no_msgid, "body": {"event": {"eventtype": "enter_chat"}, **user}}
    await server.push(frame)
    await server.push(frame)  # no msgid: the req_id identifies the redelivery
    other = await server.send_event("enter_chat", msgid="ev-2", **user)
    await server.wait_for(lambda: bool(server.sent("aibot_respond_welcome_msg", other)))
    await bot.settle()
    welcomed = [f["headers"]["req_id"] for f in server.sent("aibot_respond_welcome_msg")]
    assert sorted(welcomed) == sorted([first, "ev-plain", other])
    assert again not in welcomed


# ---------------------------------------------------------------- a second instance of the same bot


async def test_a_second_instance_takes_over_and_the_first_stops_reconnecting(
    bot: BotHarness, server: FakeAiBotServer, tmp_path: Path
) -> None:
    first = await bot.start()
    conn = first.bots["team"].conn
    assert conn is not None
    second = BotHarness(server, ScriptedSubmitter(), tmp_path / "second")
    try:
        with capture_logs() as logs:
            await second.start()  # WeCom sends disconnected_event to the older connection, then closes it
            await server.wait_for(lambda: server.subscribed == 2)
            async with asyncio.timeout(3):
                await conn.wait_finished()
        assert conn.replaced
        assert any(e["event"] == "wecom_bot_replaced" for e in logs)
        req_id = await server.send_message(server.text_body("谁来回答", msgid="takeover-1"))
        await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
        assert isinstance(second.gateway, ScriptedSubmitter) and len(second.gateway.received) == 1
        assert bot.gateway.received == []
        assert server.connections == 2  # the first one did not come back
    finally:
        if second.channel is not None:
            await second.channel.stop()
