"""Feishu over the durable inbox: an event is stored before its ack (webhook 200, long-connection ack frame),
refused when it cannot be, and answered once after a hard stop by the next process on the same data dir."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from agenthub.storage.inbox import FileInbox
from tests.support.fakes.feishu import (
    FakeCard,
    FakeFeishu,
    Harness,
    feishu_encrypt,
    feishu_headers,
    message_event,
    running_channel,
)
from tests.support.fakes.submitter import ScriptedSubmitter

APP_ID, SECRET, TOKEN, KEY = "cli_inbox1", "s3cret-inbox1", "vtoken-inbox", "enc-key-inbox"
WEBHOOK = {"app_id": APP_ID, "app_secret": SECRET, "mode": "webhook", "verification_token": TOKEN, "encrypt_key": KEY}
WS = {"app_id": APP_ID, "app_secret": SECRET}


async def post_event(h: Harness, payload: dict[str, Any]) -> int:
    body = feishu_encrypt(payload, KEY)
    headers = feishu_headers(body, KEY)
    async with aiohttp.ClientSession() as s, s.post(h.events_url("main"), data=body, headers=headers) as r:
        return r.status


def shown_card(fake: FakeFeishu, event: dict[str, Any]) -> FakeCard:
    """The card the user sees last under the message: the answer, not the dead process's placeholder."""
    message_id = event["event"]["message"]["message_id"]
    sent = [m for m in fake.messages if m.target == message_id and m.msg_type == "interactive"]
    return fake.cards[sent[-1].content["data"]["card_id"]]


def answered(fake: FakeFeishu, event: dict[str, Any]) -> bool:
    message_id = event["event"]["message"]["message_id"]
    return any(m.target == message_id and m.msg_type == "interactive" for m in fake.messages) and (
        not shown_card(fake, event).streaming
    )


async def hard_stop(h: Harness) -> None:
    """The process dies before answering: every task is cancelled, nothing settles."""
    await h.channel._tasks.close(0)


async def resume_on(fake: FakeFeishu, data_dir: Path, state_dir: Path, app: dict[str, Any]) -> ScriptedSubmitter:
    """The next process: a fresh inbox on the same data dir and a fresh gateway; the channel resumes."""
    gateway = ScriptedSubmitter()
    inbox = FileInbox(data_dir, fsync=False)
    async with running_channel(fake, state_dir, {"main": app}, gateway, inbox=inbox) as h:
        await h.channel.resume(await inbox.unsettled())
        await fake.wait_until(lambda: fake.closed_cards() == 1)
        await h.channel._tasks.join()
    assert await FileInbox(data_dir, fsync=False).unsettled() == []
    return gateway


async def test_a_webhook_event_cut_by_a_hard_stop_is_answered_once_after_the_restart(tmp_path: Path) -> None:
    data_dir, event = tmp_path / "data", message_event("崩溃前", token=TOKEN, app_id=APP_ID)
    async with FakeFeishu({APP_ID: SECRET}) as fake:
        first = ScriptedSubmitter(delay_s=30)
        async with running_channel(fake, tmp_path, {"main": WEBHOOK}, first, inbox=FileInbox(data_dir)) as h:
            assert await post_event(h, event) == 200
            await first.wait_for(1)
            await hard_stop(h)
        assert fake.closed_cards() == 0
        second = await resume_on(fake, data_dir, tmp_path, WEBHOOK)
        shown = shown_card(fake, event)
    assert [m.content for m in second.received] == ["崩溃前"]
    assert second.received[0].metadata["inbox_id"]
    assert (shown.content, shown.streaming) == ("echo: 崩溃前", False)


async def test_a_webhook_event_that_cannot_be_stored_gets_a_5xx_and_its_redelivery_is_answered(
    tmp_path: Path,
) -> None:
    data_dir, event = tmp_path / "data", message_event("存不下", token=TOKEN, app_id=APP_ID)
    gateway = ScriptedSubmitter()
    async with (
        FakeFeishu({APP_ID: SECRET}) as fake,
        running_channel(fake, tmp_path, {"main": WEBHOOK}, gateway, inbox=FileInbox(data_dir)) as h,
    ):
        data_dir.write_text("a file where the data directory should be")
        assert await post_event(h, event) == 503
        await h.channel._tasks.join()
        assert gateway.received == []
        data_dir.unlink()  # the disk is back: Feishu's redelivery is new, not a duplicate
        assert await post_event(h, event) == 200
        await fake.wait_until(lambda: fake.closed_cards() == 1)
    assert [m.content for m in gateway.received] == ["存不下"]


async def test_a_long_connection_event_is_acked_once_stored_and_answered_once_after_a_hard_stop(
    tmp_path: Path,
) -> None:
    data_dir, event = tmp_path / "data", message_event("长连接", app_id=APP_ID)
    async with FakeFeishu({APP_ID: SECRET}) as fake:
        first = ScriptedSubmitter(delay_s=30)
        inbox = FileInbox(data_dir)
        async with running_channel(fake, tmp_path, {"main": WS}, first, inbox=inbox) as h:
            await asyncio.wait_for(fake.ws_connected.wait(), 10)
            ack = await fake.push_event(APP_ID, event)
            assert inbox.depth() == 1  # stored by the time Feishu had its ack
            redelivered = await fake.push_event(APP_ID, event)  # at-least-once: not stored twice
            assert inbox.depth() == 1
            await first.wait_for(1)
            await hard_stop(h)
        second = await resume_on(fake, data_dir, tmp_path, WS)
        shown = shown_card(fake, event)
    assert (shown.content, shown.streaming) == ("echo: 长连接", False)
    assert ack["ack"]["code"] == 200 and redelivered["ack"]["code"] == 200
    assert [m.content for m in second.received] == ["长连接"]


async def test_a_long_connection_event_that_cannot_be_stored_is_not_acked(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    gateway = ScriptedSubmitter()
    async with (
        FakeFeishu({APP_ID: SECRET}) as fake,
        running_channel(fake, tmp_path, {"main": WS}, gateway, inbox=FileInbox(data_dir)) as h,
    ):
        await asyncio.wait_for(fake.ws_connected.wait(), 10)
        data_dir.write_text("a file where the data directory should be")
        ack = await fake.push_event(APP_ID, message_event("存不下", app_id=APP_ID))
        await h.channel._tasks.join()
    assert ack["ack"]["code"] == 500  # Feishu delivers it again
    assert gateway.received == []


async def test_resumed_events_keep_each_chats_order(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    events = [
        message_event(f"{chat} {n}", token=TOKEN, app_id=APP_ID, chat_id=f"oc_{chat}", sender=f"ou_{chat}")
        for n in range(1, 4)
        for chat in ("a", "b")
    ]
    async with FakeFeishu({APP_ID: SECRET}) as fake:
        first = ScriptedSubmitter(delay_s=30)
        async with running_channel(fake, tmp_path, {"main": WEBHOOK}, first, inbox=FileInbox(data_dir)) as h:
            for event in events:
                assert await post_event(h, event) == 200
            await first.wait_for(2)  # one turn per chat runs, the others wait behind it
            await hard_stop(h)
        gateway = ScriptedSubmitter()
        inbox = FileInbox(data_dir, fsync=False)
        async with running_channel(fake, tmp_path, {"main": WEBHOOK}, gateway, inbox=inbox) as h:
            await h.channel.resume(await inbox.unsettled())
            await fake.wait_until(lambda: all(answered(fake, e) for e in events))
    by_chat = {
        c: [m.content for m in gateway.received if m.metadata["feishu_chat_id"] == f"oc_{c}"] for c in ("a", "b")
    }
    assert by_chat == {"a": ["a 1", "a 2", "a 3"], "b": ["b 1", "b 2", "b 3"]}
