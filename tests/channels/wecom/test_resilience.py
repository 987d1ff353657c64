"""Review findings on the WeCom channel: text lost around stream expiry, unfinished streams, dedup disk errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from structlog.testing import capture_logs

from agenthub.messages import DeltaEvent, DoneEvent
from channels.wecom import WeComChannel
from channels.wecom.aibot_stream import STREAM_EXPIRED
from channels.wecom.text import strip_markdown, utf8_len
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.fakes.wecom import FakeAiBotServer, FakeQyApi, channel_context
from tests.support.wecom import BOT_ID, BOT_SECRET, BotHarness, Harness, SteppedGateway, app_table, bot_table, text


def _rejects_finish(frame: dict[str, Any]) -> int | None:
    """WeCom expired the stream just as it was being finished."""
    if frame.get("cmd") == "aibot_respond_msg" and frame["body"]["stream"]["finish"]:
        return STREAM_EXPIRED
    return None


def _accepted_stream_text(server: FakeAiBotServer, req_id: str, rejected: set[str]) -> str:
    accepted = [s["content"] for s in server.streams(req_id) if s["content"] not in rejected]
    return accepted[-1] if accepted else ""


@pytest.fixture
async def server() -> AsyncIterator[FakeAiBotServer]:
    fake = await FakeAiBotServer(BOT_ID, BOT_SECRET).start()
    yield fake
    await fake.close()


async def test_text_is_not_lost_when_the_finish_frame_hits_stream_expiry(
    stepped: tuple[BotHarness, SteppedGateway], server: FakeAiBotServer
) -> None:
    bot, gateway = stepped
    server.ack_rule = _rejects_finish
    await bot.start()
    req_id = await server.send_message(server.text_body("问", msgid="exp-finish"))
    await gateway.steps.put(DeltaEvent("前半部分。"))
    await server.wait_for(lambda: any(s["content"] == "前半部分。" for s in server.streams(req_id)))
    await gateway.steps.put(DoneEvent("前半部分。后半部分。"))
    await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
    await bot.settle()
    follow_ups = [f["body"]["markdown"]["content"] for f in server.sent("aibot_send_msg")]
    assert "前半部分。" + "".join(follow_ups) == "前半部分。后半部分。"


async def test_text_is_not_skipped_when_the_cap_frame_hits_stream_expiry(
    stepped: tuple[BotHarness, SteppedGateway], server: FakeAiBotServer
) -> None:
    bot, gateway = stepped
    server.ack_rule = _rejects_finish
    await bot.start(stream_cap_bytes=1024)
    first = "甲" * 200 + "。\n"  # 603 bytes: fits the cap
    second = "".join(f"第{i}句乙乙乙乙乙。" for i in range(60))  # pushes the stream past 1024 bytes
    full = first + second
    req_id = await server.send_message(server.text_body("长", msgid="exp-cap"))
    await gateway.steps.put(DeltaEvent(first))
    await server.wait_for(lambda: any(s["content"] == first for s in server.streams(req_id)))
    await gateway.steps.put(DeltaEvent(second))
    await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
    await gateway.steps.put(DoneEvent(full))
    await bot.settle()
    follow_ups = [f["body"]["markdown"]["content"] for f in server.sent("aibot_send_msg")]
    assert all(utf8_len(p) <= 1024 for p in follow_ups)
    assert first + "".join(follow_ups) == full


async def test_stopping_the_daemon_mid_turn_still_finishes_the_stream(server: FakeAiBotServer, tmp_path: Path) -> None:
    slow = ScriptedSubmitter(chunks=2, delay_s=0.2, reply_for=lambda m: "一二三四五六七八九十" * 100)
    table = {**bot_table(server), "stop_grace_s": 0.1}
    channel = WeComChannel(channel_context(slow, tmp_path), table)
    await channel.start()
    req_id = await server.send_message(server.text_body("慢", msgid="stop-finish"))
    await server.wait_for(lambda: any(s["content"].startswith("一二三") for s in server.streams(req_id)))
    async with asyncio.timeout(3):
        await channel.stop()
    last = server.streams(req_id)[-1]
    assert last["finish"] is True
    assert last["content"].startswith("一二三")  # what was shown stays, plus a note
    assert len(channel.tasks) == 0


async def test_stop_does_not_hang_when_the_finish_frame_gets_no_ack(server: FakeAiBotServer, tmp_path: Path) -> None:
    slow = ScriptedSubmitter(chunks=1, delay_s=30)
    table = {**bot_table(server, ack_timeout_s=30.0), "stop_grace_s": 0.05}
    channel = WeComChannel(channel_context(slow, tmp_path), table)
    await channel.start()
    req_id = await server.send_message(server.text_body("慢", msgid="stop-noack"))
    await server.wait_for(lambda: bool(server.streams(req_id)))
    server.unanswered.add("aibot_respond_msg")
    async with asyncio.timeout(4):
        await channel.stop()


# ---------------------------------------------------------------- dedup memory on a failing disk


async def test_app_message_is_answered_when_the_dedup_file_cannot_be_written(api: FakeQyApi, tmp_path: Path) -> None:
    h = Harness(api, ScriptedSubmitter(), tmp_path)
    try:
        await h.start()
        (tmp_path / "app-hr.dedup.jsonl").mkdir()  # every append now fails with IsADirectoryError
        with capture_logs() as logs:
            assert await h.post(text("磁盘坏了也要回答", msg_id=31337)) == (200, "")
            await api.wait_for(lambda: len(api.sends) == 1)
        assert api.texts() == ["echo: 磁盘坏了也要回答"]
        assert any(e["event"] == "wecom_dedup_unavailable" for e in logs)
    finally:
        await h.stop()
        await h.http.close()


async def test_bot_message_is_answered_when_the_dedup_file_cannot_be_written(
    server: FakeAiBotServer, tmp_path: Path
) -> None:
    h = BotHarness(server, ScriptedSubmitter(), tmp_path)
    try:
        await h.start()
        (tmp_path / "bot-team.dedup.jsonl").mkdir()
        req_id = await server.send_message(server.text_body("还在吗", msgid="disk-1"))
        await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
        assert server.streams(req_id)[-1]["content"] == "echo: 还在吗"
    finally:
        assert h.channel is not None
        await h.channel.stop()


# ---------------------------------------------------------------- markdown stripping keeps code intact


def test_strip_markdown_leaves_code_untouched() -> None:
    reply = (
        "## 用法\n"
        "调用 `obj.__init__()` 即可，**注意**参数。\n"
        "```python\n"
        "# 初始化\n"
        "class A:\n"
        "    def __init__(self, **kwargs):\n"
        "        self.x = kwargs  # **kwargs 保留\n"
        "- item\n"
        "```\n"
        "- 第一点\n"
    )
    assert strip_markdown(reply) == (
        "用法\n"
        "调用 obj.__init__() 即可，注意参数。\n"
        "# 初始化\n"
        "class A:\n"
        "    def __init__(self, **kwargs):\n"
        "        self.x = kwargs  # **kwargs 保留\n"
        "- item\n"
        "• 第一点\n"
    )


# ---------------------------------------------------------------- start-up with a misbehaving token endpoint


async def test_a_gettoken_answer_without_a_token_does_not_take_the_other_credentials_down(
    api: FakeQyApi, server: FakeAiBotServer, tmp_path: Path
) -> None:
    async def no_token(request: web.Request) -> web.Response:
        return web.json_response({"errcode": 0, "errmsg": "ok"})

    broken = web.Application()
    broken.router.add_get("/cgi-bin/gettoken", no_token)
    broken_server = TestServer(broken, host="127.0.0.1")
    await broken_server.start_server()
    table = app_table(api)
    table["apps"]["odd"] = {**table["apps"]["hr"], "api_base": str(broken_server.make_url("")).rstrip("/")}
    table["bots"] = bot_table(server)["bots"]
    channel = WeComChannel(channel_context(ScriptedSubmitter(), tmp_path), table)
    try:
        with capture_logs() as logs:
            await channel.start()
        await server.wait_for(lambda: server.subscribed == 1)
        failed = [e for e in logs if e["event"] == "wecom_app_start_failed"]
        assert [e["cred_id"] for e in failed] == ["odd"] and "access_token" in failed[0]["error"]
        assert [e["cred_id"] for e in logs if e["event"] == "wecom_app_ready"] == ["hr"]
    finally:
        await channel.stop()
        await broken_server.close()
