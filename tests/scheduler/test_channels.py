"""A reminder made by the model's tool call goes out through each channel's fake platform when the clock says so."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agenthub.api.server import HttpApi
from agenthub.channel import Channel
from agenthub.cli.chat import relay_pushes
from agenthub.clock import ManualClock
from agenthub.config import Settings
from agenthub.hosting.app import Services, assemble, build_services
from agenthub.hosting.daemon import Daemon
from agenthub.hosting.remote import RemoteGateway
from agenthub.hosting.systemd import Notifier
from agenthub.messages import InboundMessage
from agenthub.scheduler.jobs import Job
from agenthub.scheduler.store import JobStore
from agenthub.scheduler.wiring import start_scheduler, stop_scheduler
from agenthub.storage.tokens import TokenStore
from channels.wecom import WeComChannel
from tests.support.fakes.anthropic import FakeAnthropic, reply_text, reply_tool
from tests.support.fakes.feishu import FakeFeishu, feishu_encrypt, feishu_headers, message_event, running_channel
from tests.support.fakes.wecom import FakeAiBotServer, FakeQyApi, channel_context, serve_routes, signed_callback
from tests.support.scheduler import START, RecordingChannel, shanghai, until
from tests.support.wecom import AES_KEY, BOT_ID, BOT_SECRET, CORP_ID, SECRET, TOKEN, app_table, bot_table, text

REMIND = {"action": "create", "at": "2026-12-02T09:00:00", "text": "该交周报了"}
DUE = shanghai(2026, 12, 2, 9, 0)


def script_reminder(fake_llm: FakeAnthropic, args: dict[str, Any] = REMIND) -> None:
    fake_llm.script(reply_tool("manage_cron_jobs", args), reply_text("好的，明天上午九点提醒你。"))


def tool_result(fake_llm: FakeAnthropic) -> dict[str, Any]:
    body = fake_llm.message_requests()[-1].body
    assert body is not None
    [result] = [b for b in body["messages"][-1]["content"] if b.get("type") == "tool_result"]
    return dict(result)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


async def test_wecom_app_reminder_goes_out_through_message_send(
    settings: Settings, fake_llm: FakeAnthropic, clock: ManualClock, tmp_path: Path
) -> None:
    api = await FakeQyApi(CORP_ID, SECRET).start()
    table = app_table(api)
    table["apps"]["hr"]["agent"] = None
    async with build_services(settings, clock=clock) as services, aiohttp.ClientSession() as http:
        gateway = services.gateway
        context = channel_context(gateway, tmp_path / "state", settings)
        channel = WeComChannel(context, table)
        await channel.start()
        server = await serve_routes(context)
        await start_scheduler(services, [channel])
        try:
            script_reminder(fake_llm)
            ask = text("明天上午九点提醒我交周报")
            query, body = signed_callback(ask, token=TOKEN, aes_key=AES_KEY, corp_id=CORP_ID)
            async with http.post(server.make_url("/wecom/hr/callback").with_query(query), data=body) as resp:
                assert resp.status == 200
            await api.wait_for(lambda: len(api.sends) == 1, timeout=10)
            assert not tool_result(fake_llm).get("is_error")
            clock.advance(DUE - clock())
            await api.wait_for(lambda: len(api.sends) == 2, timeout=10)
            reminder = api.sends[1]
            assert reminder["touser"] == "zhangsan" and reminder["agentid"] == 1000002
            assert api.texts()[1] == "该交周报了"
        finally:
            await stop_scheduler(services)
            await channel.stop()
            await server.close()
            await api.close()


async def test_wecom_ai_bot_reminder_goes_out_through_aibot_send_msg(
    settings: Settings, fake_llm: FakeAnthropic, clock: ManualClock, tmp_path: Path
) -> None:
    server = await FakeAiBotServer(BOT_ID, BOT_SECRET).start()
    table = bot_table(server)
    table["bots"]["team"]["agent"] = None
    async with build_services(settings, clock=clock) as services:
        gateway = services.gateway
        channel = WeComChannel(channel_context(gateway, tmp_path / "state", settings), table)
        await channel.start()
        await start_scheduler(services, [channel])
        try:
            script_reminder(fake_llm)
            req_id = await server.send_message(server.text_body("明天上午九点提醒我交周报", msgid="m-1"))
            await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)), timeout=10)
            assert not tool_result(fake_llm).get("is_error")
            assert server.sent("aibot_send_msg") == []
            clock.advance(DUE - clock())
            await server.wait_for(lambda: len(server.sent("aibot_send_msg")) == 1, timeout=10)
            [push] = server.sent("aibot_send_msg")
            assert push["body"]["chatid"] == "zhangsan"
            assert push["body"]["markdown"]["content"] == "该交周报了"
        finally:
            await stop_scheduler(services)
            await channel.stop()
            await server.close()


FEISHU_APP = {"app_id": "cli_sched", "app_secret": "s3cret", "mode": "webhook", "verification_token": "vt"}


async def test_feishu_reminder_goes_out_through_message_create(
    settings: Settings, fake_llm: FakeAnthropic, clock: ManualClock, tmp_path: Path
) -> None:
    app = {**FEISHU_APP, "encrypt_key": "enc-sched"}
    async with (
        build_services(settings, clock=clock) as services,
        FakeFeishu({"cli_sched": "s3cret"}) as fake,
        running_channel(fake, tmp_path / "state", {"main": app}, services.gateway) as h,
    ):
        gateway = services.gateway
        await start_scheduler(services, [h.channel])
        try:
            script_reminder(fake_llm)
            event = message_event("明天上午九点提醒我交周报", token="vt", app_id="cli_sched", sender="ou_zhang")
            body = feishu_encrypt(event, "enc-sched")
            headers = feishu_headers(body, "enc-sched")
            async with aiohttp.ClientSession() as s, s.post(h.events_url("main"), data=body, headers=headers) as r:
                assert r.status == 200
            await until(lambda: len(fake_llm.message_requests()) == 2)
            await until(lambda: gateway.queue_depth() == 0)
            assert not tool_result(fake_llm).get("is_error")
            before = len(fake.replies("create"))
            clock.advance(DUE - clock())
            await until(lambda: len(fake.replies("create")) == before + 1)
            sent = fake.replies("create")[-1]
            assert sent.target.startswith("open_id")
            assert "该交周报了" in json.dumps(sent.content, ensure_ascii=False)
        finally:
            await stop_scheduler(services)


async def _read_event(resp: aiohttp.ClientResponse) -> tuple[str, dict[str, Any]]:
    event = ""
    async for raw in resp.content:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            return event, json.loads(line[6:])
    raise AssertionError("the feed ended")


@asynccontextmanager
async def _http_daemon(
    settings: Settings, clock: ManualClock
) -> AsyncIterator[tuple[str, dict[str, str], Services, list[Channel]]]:
    settings = settings.model_copy(update={"http": settings.http.model_copy(update={"port": 0})})
    token = TokenStore(settings.auth_dir).create("test")
    async with build_services(settings, clock=clock) as services:
        server, channels = assemble(settings, services)
        await server.start()
        for channel in channels:
            await channel.start()
        await start_scheduler(services, channels)
        try:
            yield f"http://127.0.0.1:{server.port}", {"Authorization": f"Bearer {token}"}, services, channels
        finally:
            await stop_scheduler(services)
            for channel in reversed(channels):
                await channel.stop()
            await server.close()


async def test_http_reminder_is_stored_and_pushed_on_the_events_feed(
    settings: Settings, fake_llm: FakeAnthropic, clock: ManualClock
) -> None:
    async with _http_daemon(settings, clock) as (base, auth, _, _channels):
        session = base + "/api/agents/default/sessions/c1"
        async with aiohttp.ClientSession(headers=auth) as http:
            script_reminder(fake_llm)
            async with http.post(base + "/api/agents/default/chat", json={"chat_id": "c1", "content": "提醒我"}) as r:
                assert r.status == 200 and (await r.json())["reply"] == "好的，明天上午九点提醒你。"
            async with http.get(session + "/events") as feed:
                assert feed.status == 200 and feed.content_type == "text/event-stream"
                assert await _read_event(feed) == ("ready", {"session_key": "default:http:c1"})
                clock.advance(DUE - clock())
                event, data = await _read_event(feed)
            assert event == "push"
            assert data["session_key"] == "default:http:c1"
            assert (data["role"], data["content"]) == ("assistant", "该交周报了")
            async with http.get(session + "/messages") as r:
                messages = (await r.json())["messages"]
            assert messages[-1]["role"] == "assistant" and messages[-1]["content"] == "该交周报了"
            async with http.get(base + "/api/agents/default/sessions/../events") as r:
                assert r.status in (400, 404)


async def test_admin_routes_list_and_delete_an_agents_jobs(
    settings: Settings, fake_llm: FakeAnthropic, clock: ManualClock
) -> None:
    async with _http_daemon(settings, clock) as (base, auth, services, _channels):
        jobs = base + "/api/agents/default/jobs"
        async with aiohttp.ClientSession(headers=auth) as http:
            script_reminder(fake_llm, {"action": "create", "cron": "0 9 * * 1-5", "prompt": "今日待办"})
            async with http.post(base + "/api/agents/default/chat", json={"chat_id": "c2", "content": "每个工作日"}):
                pass
            async with http.get(jobs) as r:
                assert r.status == 200
                [job] = (await r.json())["jobs"]
            assert (job["chat_id"], job["cron"], job["prompt"]) == ("c2", "0 9 * * 1-5", "今日待办")
            assert job["next_due_local"] == "2026-12-01T09:00+08:00"
            async with http.delete(f"{jobs}/{job['id']}") as r:
                assert r.status == 204
            async with http.delete(f"{jobs}/{job['id']}") as r:
                assert r.status == 404 and (await r.json())["error"]["code"] == "job_not_found"
            async with http.get(base + "/api/agents/nobody/jobs") as r:
                assert r.status == 404
            async with aiohttp.ClientSession() as anonymous, anonymous.get(jobs) as r:
                assert r.status == 401
        assert services.scheduler is not None and services.scheduler.for_agent("default") == []


async def test_cli_connected_to_the_daemon_shows_its_sessions_reminders(
    settings: Settings, fake_llm: FakeAnthropic, clock: ManualClock
) -> None:
    async with _http_daemon(settings, clock) as (base, auth, _, channels):
        [http_channel] = [c for c in channels if isinstance(c, HttpApi)]
        token = auth["Authorization"].removeprefix("Bearer ")
        async with RemoteGateway(base, token, default_agent="default") as remote:
            script_reminder(fake_llm)
            await (await remote.submit(InboundMessage("cli", "desk", "me", "明天九点提醒我"))).text()
            terminal = RecordingChannel()
            relay = asyncio.create_task(relay_pushes(remote, terminal, "default", "desk"))
            try:
                await until(lambda: http_channel.pushes.subscribers("default", "desk") == 1)
                clock.advance(DUE - clock())
                [shown] = await terminal.wait_for(1)
            finally:
                relay.cancel()
                await asyncio.gather(relay, return_exceptions=True)
        assert (shown.channel, shown.chat_id, shown.content) == ("cli", "desk", "该交周报了")


async def test_the_daemon_starts_the_scheduler_and_catches_up_a_missed_reminder(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory(http={"port": 0})
    token = TokenStore(settings.auth_dir).create("test")
    missed = time.time() - 60  # due a minute ago, while the daemon was down: within scheduler.catch_up_s
    job = Job("abc12345", "default", "http", "c9", "Asia/Shanghai", missed - 3600, at=missed, next_due=missed)
    job = replace(job, text="补发")
    await JobStore(settings.data_dir).save("default", [job])
    daemon = Daemon(settings, notifier=Notifier({}))
    running = asyncio.create_task(daemon.run())
    try:
        await until(lambda: daemon.server is not None and daemon.server.ready)
        assert daemon.server is not None
        url = f"http://127.0.0.1:{daemon.server.port}/api/agents/default/sessions/c9/messages"
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:
            for _ in range(200):
                async with http.get(url) as r:
                    if r.status == 200 and (messages := (await r.json())["messages"]):
                        break
                await asyncio.sleep(0.05)
        assert [(m["role"], m["content"]) for m in messages] == [("assistant", "补发")]
    finally:
        daemon.request_stop()
        assert await asyncio.wait_for(running, 10) == 0
    stored = json.loads((settings.data_dir / "default" / "jobs.json").read_text(encoding="utf-8"))
    assert stored["jobs"] == []


async def test_deleting_an_http_session_deletes_its_jobs(
    settings: Settings, fake_llm: FakeAnthropic, clock: ManualClock
) -> None:
    async with _http_daemon(settings, clock) as (base, auth, services, _channels):
        async with aiohttp.ClientSession(headers=auth) as http:
            for chat in ("gone", "kept"):
                script_reminder(fake_llm)
                async with http.post(base + "/api/agents/default/chat", json={"chat_id": chat, "content": "提醒"}) as r:
                    assert r.status == 200
            async with http.delete(base + "/api/agents/default/sessions/gone") as r:
                assert r.status == 204
            async with http.get(base + "/api/agents/default/jobs") as r:
                assert [j["chat_id"] for j in (await r.json())["jobs"]] == ["kept"]
        clock.advance(DUE - clock())
        await until(lambda: services.scheduler is not None and services.scheduler.fired == 1)
        assert not (settings.data_dir / "default" / "sessions" / "default_http_gone.jsonl").exists()
