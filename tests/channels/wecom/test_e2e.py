"""End to end: fake WeCom → WeComChannel → the real gateway → the fake Anthropic LLM, and back."""

from __future__ import annotations

import asyncio
import functools
import time
from pathlib import Path

import aiohttp

from agenthub.config import Settings
from agenthub.hosting.app import build_gateway
from channels.wecom import WeComChannel
from tests.support.fakes.anthropic import FakeAnthropic, reply_text
from tests.support.fakes.wecom import (
    FakeAiBotServer,
    FakeQyApi,
    channel_context,
    serve_routes,
    signed_callback,
    text_message_xml,
)
from tests.support.wecom import AES_KEY, BOT_ID, BOT_SECRET, CORP_ID, SECRET, TOKEN, app_table, bot_table


def _finished(server: FakeAiBotServer, req_id: str) -> bool:
    return any(s["finish"] for s in server.streams(req_id))


def session_files(settings: Settings) -> list[Path]:
    return sorted(p for p in settings.data_dir.rglob("*.jsonl") if "sessions" in p.parts)


async def test_callback_acks_fast_while_the_llm_takes_3s_and_the_reply_arrives(
    settings: Settings, fake_llm: FakeAnthropic, tmp_path: Path
) -> None:
    fake_llm.script(reply_text("你好！我是 AgentHub 助手。", first_byte_delay_s=3.0))
    api = await FakeQyApi(CORP_ID, SECRET).start()
    table = app_table(api)
    table["apps"]["hr"]["agent"] = None
    async with build_gateway(settings) as gateway, aiohttp.ClientSession() as http:
        context = channel_context(gateway, tmp_path / "state", settings)
        channel = WeComChannel(context, table)
        await channel.start()
        server = await serve_routes(context)
        try:
            url = server.make_url("/wecom/hr/callback")
            # Forged and malformed callbacks first: they must leave no trace in any session.
            query, body = signed_callback("x", token="forged", aes_key=AES_KEY, corp_id=CORP_ID)
            async with http.post(url.with_query(query), data=body) as resp:
                assert resp.status == 403
            query, body = signed_callback("<xml><oops", token=TOKEN, aes_key=AES_KEY, corp_id=CORP_ID)
            async with http.post(url.with_query(query), data=body) as resp:
                assert resp.status == 400
            assert session_files(settings) == []

            xml = text_message_xml(corp_id=CORP_ID, user="zhangsan", content="你好", msg_id=31337)
            query, body = signed_callback(xml, token=TOKEN, aes_key=AES_KEY, corp_id=CORP_ID)
            started = time.monotonic()
            async with http.post(url.with_query(query), data=body) as resp:
                assert (resp.status, await resp.text()) == (200, "")
            assert time.monotonic() - started < 0.5
            await api.wait_for(lambda: len(api.sends) == 1, timeout=10)
            assert time.monotonic() - started >= 3.0
            assert api.texts() == ["你好！我是 AgentHub 助手。"]
            files = session_files(settings)
            assert len(files) == 1 and "zhangsan" in files[0].name
        finally:
            await channel.stop()
            await server.close()
            await api.close()


async def test_ai_bot_streams_a_real_turn(settings: Settings, fake_llm: FakeAnthropic, tmp_path: Path) -> None:
    answer = "智能机器人的回复会以流式消息逐步出现，最后以 finish 结束。"
    fake_llm.script(reply_text(answer, chunks=6, delta_delay_s=0.1))
    server = await FakeAiBotServer(BOT_ID, BOT_SECRET).start()
    table = bot_table(server)
    table["bots"]["team"]["agent"] = None
    async with build_gateway(settings) as gateway:
        channel = WeComChannel(channel_context(gateway, tmp_path / "state", settings), table)
        await channel.start()
        try:
            body = server.text_body("@AgentHub 讲讲流式回复", msgid="e2e-1", chattype="group", chatid="grp9")
            req_id = await server.send_message(body)
            await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)), timeout=10)
            streams = server.streams(req_id)
            assert streams[-1]["content"] == answer
            assert len({s["content"] for s in streams}) >= 3
            sent_to_llm = str(fake_llm.message_requests()[-1].body)
            assert "讲讲流式回复" in sent_to_llm
            assert "@AgentHub" not in sent_to_llm
        finally:
            await channel.stop()
            await server.close()


async def test_lines_pasted_as_several_app_messages_get_one_answer_each_burst(
    settings: Settings, fake_llm: FakeAnthropic, tmp_path: Path
) -> None:
    """Messages waiting behind a running turn go to the model as one turn; the app sends that one answer, not an
    extra "answered together" message per waiting line (each message/send counts against WeCom's member budget)."""
    release = asyncio.Event()
    fake_llm.script(reply_text("第一条的回答", hold=release), reply_text("后面三行一起的回答"))
    api = await FakeQyApi(CORP_ID, SECRET).start()
    table = app_table(api)
    table["apps"]["hr"]["agent"] = None
    async with build_gateway(settings) as gateway, aiohttp.ClientSession() as http:
        context = channel_context(gateway, tmp_path / "state", settings)
        channel = WeComChannel(context, table)
        await channel.start()
        server = await serve_routes(context)
        try:
            url = server.make_url("/wecom/hr/callback")
            for number, line in enumerate(["第一行", "第二行", "第三行", "第四行"]):
                xml = text_message_xml(corp_id=CORP_ID, user="lisi", content=line, msg_id=4200 + number)
                query, body = signed_callback(xml, token=TOKEN, aes_key=AES_KEY, corp_id=CORP_ID)
                async with http.post(url.with_query(query), data=body) as resp:
                    assert resp.status == 200
                if number == 0:
                    await fake_llm.wait_for_requests(1)
            async with asyncio.timeout(10):  # the app acks first and submits after: all four reach the gateway
                while gateway.queue_depth() < 4:  # noqa: ASYNC110 - the gateway offers no event for its queue
                    await asyncio.sleep(0.01)
            release.set()
            await api.wait_for(lambda: len(api.sends) >= 2, timeout=10)
            await channel.tasks.join()
            assert api.texts() == ["第一条的回答", "后面三行一起的回答"]
            merged = (fake_llm.requests[1].body or {})["messages"][-1]["content"]
            assert all(line in str(merged) for line in ["第二行", "第三行", "第四行"])
        finally:
            await channel.stop()
            await server.close()
            await api.close()


async def test_ai_bot_answers_odd_sender_ids_and_refuses_a_nul_one_without_stopping(
    settings: Settings, fake_llm: FakeAnthropic, tmp_path: Path
) -> None:
    """A member id the key rules refuse (a backslash, a control character) is answered; one with NUL is refused
    with the invalid-id text (no exception's text) and the bot goes on answering."""
    server = await FakeAiBotServer(BOT_ID, BOT_SECRET).start()
    table = bot_table(server)
    table["bots"]["team"]["agent"] = None
    async with build_gateway(settings) as gateway:
        channel = WeComChannel(channel_context(gateway, tmp_path / "state", settings), table)
        await channel.start()
        try:
            finals = []
            for n, user in enumerate(["a\\b", "a\x01b", "a\x00b", "zhangsan"]):
                body = server.text_body(f"@AgentHub q{n}", msgid=f"odd-{n}", user=user, chattype="group", chatid="g")
                req_id = await server.send_message(body)
                await server.wait_for(functools.partial(_finished, server, req_id), timeout=10)
                finals.append(server.streams(req_id)[-1]["content"])
        finally:
            await channel.stop()
            await server.close()
    assert [f.startswith("reply to:") for f in finals] == [True, True, False, True], finals
    assert "发送者标识" in finals[2] and "\x00" not in finals[2] and "sender_id" not in finals[2]
    assert len(fake_llm.message_requests()) == 3
