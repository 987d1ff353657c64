"""Self-built app callbacks over the durable inbox: stored before the 200, answered once across a hard stop."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from agenthub import i18n
from agenthub.channel import Channel
from agenthub.channel.inbox_flow import InboxSubmitter, InstanceInbox, resume_then_start
from agenthub.config import Settings
from agenthub.hosting.app import build_gateway
from agenthub.storage.inbox import FileInbox
from agenthub.storage.postgres import PostgresInbox, PostgresLeases, open_database
from agenthub.storage.singleton import InstanceLeases
from channels.wecom import WeComChannel
from tests.support.fakes.anthropic import FakeAnthropic, reply_text
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.fakes.wecom import FakeAiBotServer, FakeQyApi, channel_context, serve_routes, signed_callback
from tests.support.leases import BrokenLeases
from tests.support.wecom import AES_KEY, CORP_ID, TOKEN, Harness, app_table, bot_table, text, wecom_settings


async def hard_stop(harness: Harness) -> None:
    """The process dies: every task is cancelled at once, nothing gets the chance to settle."""
    assert harness.channel is not None
    await harness.channel.tasks.close(0)
    await harness.stop()


async def restart_and_resume(harness: Harness, data_dir: Path) -> FileInbox:
    """A new process on the same data dir: a fresh inbox and gateway, the channel resumes what is unsettled."""
    inbox = FileInbox(data_dir, fsync=False)
    harness.inbox = inbox
    harness.submitter = ScriptedSubmitter()
    channel = await harness.start()
    await channel.resume(await inbox.unsettled())
    await harness.settle()
    return inbox


async def test_a_callback_cut_by_a_hard_stop_is_answered_once_after_the_restart(
    harness: Harness, api: FakeQyApi, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    harness.inbox = FileInbox(data_dir, fsync=False)
    harness.submitter.delay_s = 30  # the model never answers before the crash
    await harness.start()
    assert await harness.post(text("崩溃前的问题", msg_id=8101)) == (200, "")
    await harness.submitter.wait_for(1)
    await hard_stop(harness)
    assert api.sends == []

    inbox = await restart_and_resume(harness, data_dir)
    assert [m.content for m in harness.submitter.received] == ["崩溃前的问题"]
    assert harness.submitter.received[0].metadata["inbox_id"]
    assert api.texts() == ["echo: 崩溃前的问题"]
    assert inbox.depth() == 0
    assert await FileInbox(data_dir, fsync=False).unsettled() == []  # settled durably: a third start answers nothing


async def test_an_inbox_that_cannot_be_written_gets_a_5xx_and_wecoms_retry_is_answered(
    harness: Harness, api: FakeQyApi, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    harness.inbox = FileInbox(data_dir, fsync=False)
    await harness.start()
    data_dir.write_text("a file where the data directory should be")  # the disk refuses the inbox
    xml = text("存不下的问题", msg_id=8201)
    status, _ = await harness.post(xml)
    assert status == 503
    await harness.settle()
    assert harness.submitter.received == []
    assert api.sends == []

    data_dir.unlink()  # the disk is back: WeCom's retry of the same MsgId is new, not a duplicate
    assert await harness.post(xml) == (200, "")
    await harness.settle()
    assert api.texts() == ["echo: 存不下的问题"]


async def test_a_redelivered_msgid_is_stored_once(harness: Harness, api: FakeQyApi, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    inbox = harness.inbox = FileInbox(data_dir, fsync=False)
    harness.submitter.delay_s = 30
    await harness.start()
    xml = text("重复投递", msg_id=8301)
    answers = await asyncio.gather(*(harness.post(xml) for _ in range(5)))
    assert answers == [(200, "")] * 5
    await harness.submitter.wait_for(1)
    assert inbox.depth() == 1
    await hard_stop(harness)

    await restart_and_resume(harness, data_dir)
    assert api.texts() == ["echo: 重复投递"]


async def test_a_resumed_callback_is_answered_before_one_the_restarting_channel_receives_while_it_starts(
    harness: Harness, api: FakeQyApi, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    harness.inbox = FileInbox(data_dir, fsync=False)
    harness.submitter.delay_s = 30  # never answered before the crash
    await harness.start()
    assert await harness.post(text("崩溃前的问题", msg_id=8701)) == (200, "")
    await harness.submitter.wait_for(1)
    await hard_stop(harness)

    inbox = FileInbox(data_dir, fsync=False)  # the next process, in the daemon's order
    submitter = ScriptedSubmitter()
    settings, table = wecom_settings(app_table(api), None, {})
    context = channel_context(submitter, tmp_path, settings, inbox)
    harness.channel = WeComChannel(context, table)
    harness.server = await serve_routes(context)  # the daemon listens before its channels start
    api.token_gate = asyncio.Event()  # the start waits for its access token
    starting = asyncio.create_task(resume_then_start(await inbox.unsettled(), [harness.channel]))
    await api.token_asked.wait()
    assert await harness.post(text("启动时的新问题", msg_id=8702)) == (200, "")  # same user, during the start
    api.token_gate.set()
    await starting
    await harness.settle()
    assert [m.content for m in submitter.received] == ["崩溃前的问题", "启动时的新问题"]
    assert api.texts() == ["echo: 崩溃前的问题", "echo: 启动时的新问题"]


async def test_a_channel_whose_start_raises_refuses_callbacks_instead_of_storing_what_it_would_never_answer(
    harness: Harness, api: FakeQyApi, server: FakeAiBotServer, tmp_path: Path
) -> None:
    inbox = FileInbox(tmp_path / "data", fsync=False)
    settings, table = wecom_settings({**app_table(api), **bot_table(server)}, None, {})
    context = channel_context(harness.submitter, tmp_path, settings, inbox)
    context.leases = InstanceLeases(store=BrokenLeases())  # the bot's lease cannot be opened: `start` raises
    harness.channel = WeComChannel(context, table)
    harness.server = await serve_routes(context)  # the daemon listens before its channels start
    channels: list[Channel] = [harness.channel]
    await resume_then_start([], channels)
    assert channels == []  # the daemon goes on without it

    status, _ = await harness.post(text("没人会回答的问题", msg_id=8901))
    assert status == 503  # not acknowledged: WeCom delivers it again (to an instance that can answer it)
    assert await inbox.unsettled() == []
    assert harness.submitter.received == []


async def test_a_callback_a_dead_instance_had_stored_is_taken_over_and_answered_by_a_live_one(
    harness: Harness, api: FakeQyApi, tmp_path: Path, postgres_dsn: str
) -> None:
    dead_db, live_db = await open_database(postgres_dsn), await open_database(postgres_dsn)
    try:
        dead = PostgresInbox(dead_db, owner="dead-host:1:0")  # it never renews an `instance:` lease again
        await dead.accept("wecom:app:hr", {"xml": text("死掉的实例收到的", msg_id=8801)})
        await dead.accept("wecom:bot:nobody", {"req_id": "r1", "body": {}})  # no channel here answers this one
        inbox = PostgresInbox(live_db, owner="live-host:2:0")
        harness.inbox = inbox
        channel = await harness.start()
        leases = InstanceLeases(store=PostgresLeases(live_db), holder="live-host:2:0", ttl_s=15)
        live = InstanceInbox(inbox, leases, InboxSubmitter(inbox, harness.submitter), [channel])
        await live.open()
        try:
            assert await live.take_over() == 1
            await harness.settle()
        finally:
            await live.close()
        assert [m.content for m in harness.submitter.received] == ["死掉的实例收到的"]
        assert api.texts() == ["echo: 死掉的实例收到的"]
        assert [e.source for e in await PostgresInbox(live_db).unsettled()] == ["wecom:bot:nobody"]
    finally:
        await dead_db.close()
        await live_db.close()


async def test_resumed_callbacks_keep_each_users_order(harness: Harness, api: FakeQyApi, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    harness.inbox = FileInbox(data_dir, fsync=False)
    harness.submitter.delay_s = 30
    await harness.start()
    for n in range(1, 4):
        assert await harness.post(text(f"张三 {n}", msg_id=8400 + n)) == (200, "")
        assert await harness.post(text(f"李四 {n}", msg_id=8410 + n, user="lisi")) == (200, "")
    await harness.submitter.wait_for(2)  # one turn per user runs; the others wait behind it
    await hard_stop(harness)

    await restart_and_resume(harness, data_dir)
    by_user = {u: [m.content for m in harness.submitter.received if m.sender_id == u] for u in ("zhangsan", "lisi")}
    assert by_user == {"zhangsan": ["张三 1", "张三 2", "张三 3"], "lisi": ["李四 1", "李四 2", "李四 3"]}
    sent = {u: [m["text"]["content"] for m in api.sends if m["touser"] == u] for u in ("zhangsan", "lisi")}
    assert sent == {
        "zhangsan": ["echo: 张三 1", "echo: 张三 2", "echo: 张三 3"],
        "lisi": [f"echo: 李四 {n}" for n in (1, 2, 3)],
    }


async def test_a_callback_during_the_drain_is_answered_after_the_restart(
    harness: Harness, api: FakeQyApi, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    harness.inbox = FileInbox(data_dir, fsync=False)
    harness.submitter.accepting = False  # SIGTERM: the gateway drains
    await harness.start()
    assert await harness.post(text("重启时的问题", msg_id=8501)) == (200, "")
    await harness.settle()
    assert harness.submitter.received == []
    assert api.texts() == [i18n.text("channel.deferred", "zh-CN")]
    await harness.stop()

    await restart_and_resume(harness, data_dir)
    assert api.texts()[1:] == ["echo: 重启时的问题"]


async def test_with_the_real_gateway_a_turn_killed_mid_answer_is_answered_once_after_the_restart(
    settings: Settings, fake_llm: FakeAnthropic, api: FakeQyApi, tmp_path: Path
) -> None:
    fake_llm.script(reply_text("死掉的进程的回答", first_byte_delay_s=30.0))  # the process dies before this
    table = app_table(api)
    table["apps"]["hr"]["agent"] = None  # the default agent of `settings`
    xml = text("杀掉之前问的", msg_id=8601)
    query, body = signed_callback(xml, token=TOKEN, aes_key=AES_KEY, corp_id=CORP_ID)
    async with build_gateway(settings) as gateway, aiohttp.ClientSession() as http:
        context = channel_context(gateway, tmp_path / "state", settings, FileInbox(settings.data_dir))
        channel = WeComChannel(context, table)
        await channel.start()
        server = await serve_routes(context)
        try:
            async with http.post(server.make_url("/wecom/hr/callback").with_query(query), data=body) as resp:
                assert resp.status == 200
            await fake_llm.wait_for_requests(1, timeout_s=30)
            await channel.tasks.close(0)  # kill -9: nothing after this point runs
        finally:
            await channel.stop()
            await server.close()

    fake_llm.script(reply_text("重启后的回答"))
    async with build_gateway(settings) as gateway:
        inbox = FileInbox(settings.data_dir)
        context = channel_context(gateway, tmp_path / "state", settings, inbox)
        channel = WeComChannel(context, table)
        await channel.start()
        try:
            await channel.resume(await inbox.unsettled())
            # the resumed gateway imports the SDK first: slow on a loaded box
            await api.wait_for(lambda: len(api.sends) == 1, timeout=30)
            await channel.tasks.join()
        finally:
            await channel.stop()
    assert api.texts() == ["重启后的回答"]
    assert await FileInbox(settings.data_dir).unsettled() == []
