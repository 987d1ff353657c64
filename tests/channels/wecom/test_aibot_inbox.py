"""AI bot callbacks over the durable inbox: stored before the first stream frame, answered once after a hard stop
(as a proactive message: the old connection's streams are gone), and deferred, not lost, during a drain."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agenthub import i18n
from agenthub.storage.inbox import FileInbox
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.fakes.wecom import FakeAiBotServer
from tests.support.wecom import BotHarness


@pytest.fixture
async def bots(server: FakeAiBotServer, tmp_path: Path) -> AsyncIterator[list[BotHarness]]:
    """The bot of each process started on one data dir (the first one's gateway never answers in time)."""
    made: list[BotHarness] = []
    yield made
    for h in made:
        if h.channel is not None:
            await h.channel.stop()


def process(bots: list[BotHarness], server: FakeAiBotServer, tmp_path: Path, gateway: ScriptedSubmitter) -> BotHarness:
    h = BotHarness(server, gateway, tmp_path)
    h.inbox = FileInbox(tmp_path / "data", fsync=False)
    bots.append(h)
    return h


async def hard_stop(h: BotHarness) -> None:
    """The process dies: every task is cancelled at once, nothing settles."""
    assert h.channel is not None
    await h.channel.tasks.close(0)
    await h.channel.stop()


async def resume(h: BotHarness) -> None:
    assert h.channel is not None and h.inbox is not None
    await h.channel.resume(await h.inbox.unsettled())
    await h.settle()


def pushed(server: FakeAiBotServer) -> list[str]:
    return [f["body"]["markdown"]["content"] for f in server.sent("aibot_send_msg")]


async def test_a_callback_cut_by_a_hard_stop_is_answered_once_by_the_next_process(
    bots: list[BotHarness], server: FakeAiBotServer, tmp_path: Path
) -> None:
    first = process(bots, server, tmp_path, ScriptedSubmitter(delay_s=30))
    await first.start()
    body = server.text_body("崩溃前的问题", msgid="m-crash")
    await server.send_message(body)
    await server.send_message(body)  # a duplicate: not stored twice
    await first.gateway.wait_for(1)
    assert first.inbox is not None and first.inbox.depth() == 1
    await hard_stop(first)

    second = process(bots, server, tmp_path, ScriptedSubmitter())
    await second.start()
    await resume(second)
    assert [m.content for m in second.gateway.received] == ["崩溃前的问题"]
    assert second.gateway.received[0].metadata["inbox_id"]
    assert pushed(server) == ["echo: 崩溃前的问题"]
    assert await FileInbox(tmp_path / "data", fsync=False).unsettled() == []


async def test_a_callback_during_the_drain_is_deferred_and_answered_after_the_restart(
    bots: list[BotHarness], server: FakeAiBotServer, tmp_path: Path
) -> None:
    draining = ScriptedSubmitter(accepting=False)  # SIGTERM: the gateway answers nothing new
    first = process(bots, server, tmp_path, draining)
    await first.start()
    req_id = await server.send_message(server.text_body("重启时的问题", msgid="m-drain"))
    await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
    await first.settle()
    assert server.streams(req_id)[-1]["content"] == i18n.text("channel.deferred", "zh-CN")
    assert draining.received == []
    assert first.channel is not None
    await first.channel.stop()

    second = process(bots, server, tmp_path, ScriptedSubmitter())
    await second.start()
    await resume(second)
    assert pushed(server) == ["echo: 重启时的问题"]


async def test_a_callback_that_cannot_be_stored_is_told_to_send_again_and_not_run(
    bots: list[BotHarness], server: FakeAiBotServer, tmp_path: Path
) -> None:
    h = process(bots, server, tmp_path, ScriptedSubmitter())
    await h.start()
    (tmp_path / "data").write_text("a file where the data directory should be")
    req_id = await server.send_message(server.text_body("存不下", msgid="m-full"))
    await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
    await h.settle()
    assert server.streams(req_id)[-1]["content"] == i18n.text("channel.submit_failed", "zh-CN")
    assert h.gateway.received == []
