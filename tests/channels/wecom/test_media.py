"""Images, files and voice from WeCom: the app's `media/get` and the AI bot's encrypted media urls, bounded."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agenthub import i18n
from agenthub.messages import Attachment
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.fakes.wecom import FakeAiBotServer, FakeQyApi, message_xml
from tests.support.wecom import AGENT_ID, CORP_ID, BotHarness, Harness, text

MiB = 1024 * 1024
PNG = b"\x89PNG\r\n\x1a\n" + os.urandom(6000)
JPEG = b"\xff\xd8\xff\xe0" + os.urandom(9000)


def too_large(locale: str, what: str, size_mb: str, limit_mb: str = "20") -> str:
    kind = i18n.text(f"media.what.{what}", locale)
    return i18n.text("media.too_large", locale, what=kind, size_mb=size_mb, limit_mb=limit_mb)


def download_failed(locale: str, what: str) -> str:
    return i18n.text("media.download_failed", locale, what=i18n.text(f"media.what.{what}", locale))


def app_media(kind: str, media_id: str, msg_id: int, **extra: str | int) -> str:
    fields: dict[str, str | int] = {"MsgType": kind, "MediaId": media_id, "MsgId": msg_id, **extra}
    if kind == "image":
        fields["PicUrl"] = "https://wework.qpic.cn/wwpic/x/0"
    return message_xml(CORP_ID, "lisi", AGENT_ID, fields)


# ---------------------------------------------------------------- self-built app: media/get


async def test_app_image_reaches_the_submitted_message_as_its_bytes(harness: Harness, api: FakeQyApi) -> None:
    api.add_media("MID-img", PNG, filename="MID-img.png", content_type="image/png")
    await harness.start()
    assert await harness.post(app_media("image", "MID-img", 31)) == (200, "")
    await harness.settle()
    (message,) = harness.submitter.received
    assert message.attachments == (Attachment("image", "MID-img.png", "image/png", PNG),)
    assert message.content == ""
    assert api.media_tokens == api.tokens_issued[:1]  # the token cached at start, no new gettoken


async def test_app_file_arrives_as_an_attachment_with_its_name(harness: Harness, api: FakeQyApi) -> None:
    data = b"%PDF-1.7\n" + os.urandom(20000)
    api.add_media("MID-doc", data, filename="季度报告 Q3.pdf", content_type="application/octet-stream")
    await harness.start()
    await harness.post(app_media("file", "MID-doc", 32))
    await harness.settle()
    (message,) = harness.submitter.received
    (attachment,) = message.attachments
    assert message.message_id == "32"  # wechatpy has no `file` type: read from the raw callback fields
    assert (attachment.kind, attachment.name, attachment.mime_type) == ("file", "季度报告 Q3.pdf", "application/pdf")
    assert attachment.data == data


async def test_app_json_file_is_a_file_not_an_errcode_and_names_lose_their_path(
    harness: Harness, api: FakeQyApi
) -> None:
    config = b'{"errcode": 0, "note": "a user\'s own file"}'
    api.add_media("MID-json", config, filename="settings.json", content_type="application/json")
    api.add_media("MID-path", b"secret", filename="../../etc/passwd", content_type="application/octet-stream")
    await harness.start()
    await harness.post(app_media("file", "MID-json", 41))
    await harness.settle()
    await harness.post(app_media("file", "MID-path", 42))
    await harness.settle()
    first, second = (m.attachments[0] for m in harness.submitter.received)
    assert (first.name, first.mime_type, first.data) == ("settings.json", "application/json", config)
    assert (second.name, second.data) == ("passwd", b"secret")


async def test_app_media_with_an_expired_token_is_fetched_again_with_a_new_one(
    harness: Harness, api: FakeQyApi
) -> None:
    api.add_media("MID-img", JPEG, filename="MID-img.jpg", content_type="image/jpeg")
    await harness.start()
    api.expire_tokens()
    await harness.post(app_media("image", "MID-img", 33))
    await harness.settle()
    assert harness.submitter.received[0].attachments[0].data == JPEG
    assert api.media_tokens == api.tokens_issued  # refused once (42001), then the refetched token


@pytest.mark.parametrize(("locale", "expected"), [(None, "zh-CN"), ("en", "en")])
async def test_app_30mb_file_is_refused_with_a_clear_reply_in_the_chat_locale(
    harness: Harness, api: FakeQyApi, locale: str | None, expected: str
) -> None:
    api.add_media("MID-big", os.urandom(30 * MiB), filename="big.zip", content_type="application/zip")
    harness.locale = locale
    await harness.start()
    await harness.post(app_media("file", "MID-big", 34))
    await harness.settle()
    assert harness.submitter.received == []
    assert api.texts() == [too_large(expected, "file", "30")]
    assert api.media.bytes_sent["MID-big"] < 30 * MiB  # refused on its Content-Length, not read whole


async def test_app_download_without_a_length_stops_past_the_limit(harness: Harness, api: FakeQyApi) -> None:
    api.add_media("MID-stream", os.urandom(30 * MiB), filename="s.bin", content_type="application/zip", chunked=True)
    harness.media = {"max_download_bytes": 1 * MiB}
    await harness.start()
    await harness.post(app_media("file", "MID-stream", 35))
    await harness.settle()
    assert harness.submitter.received == []
    assert api.texts() == [too_large("zh-CN", "file", "> 1", limit_mb="1")]
    assert api.media.bytes_sent["MID-stream"] < 30 * MiB


async def test_app_download_errcode_gets_the_clear_reply(harness: Harness, api: FakeQyApi) -> None:
    await harness.start()
    await harness.post(app_media("image", "MID-unknown", 36))  # errcode 40007 invalid media_id
    await harness.settle()
    api.add_media("MID-doc", b"x" * 100, filename="a.txt", content_type="text/plain")
    api.media_errcodes = [48002]  # the API is not allowed for this app
    await harness.post(app_media("file", "MID-doc", 37))
    await harness.settle()
    assert harness.submitter.received == []
    assert sorted(api.texts()) == sorted([download_failed("zh-CN", "image"), download_failed("zh-CN", "file")])
    assert not any("40007" in t or "errcode" in t for t in api.texts())


async def test_app_download_rate_limited_is_retried_with_backoff(harness: Harness, api: FakeQyApi) -> None:
    api.add_media("MID-img", PNG, filename="MID-img.png", content_type="image/png")
    api.media_errcodes = [45009, 45033]
    await harness.start()
    await harness.post(app_media("image", "MID-img", 43))
    await harness.settle()
    assert harness.submitter.received[0].attachments[0].data == PNG
    assert len(api.media_tokens) == 3


async def test_app_download_past_the_time_bound_gets_the_clear_reply(harness: Harness, api: FakeQyApi) -> None:
    api.add_media("MID-slow", PNG, filename="slow.png", content_type="image/png")
    api.media.delay_s = 1.5
    harness.media = {"download_timeout_s": 0.3}
    harness.locale = "en"
    await harness.start()
    await harness.post(app_media("image", "MID-slow", 38))
    await harness.settle()
    assert harness.submitter.received == []
    assert api.texts() == [download_failed("en", "image")]


async def test_app_voice_without_a_transcript_and_unsupported_types_get_clear_replies(
    harness: Harness, api: FakeQyApi
) -> None:
    await harness.start()
    await harness.post(app_media("voice", "MID-v", 39, Format="amr"))
    video: dict[str, str | int] = {"MsgType": "video", "MediaId": "v", "ThumbMediaId": "t", "MsgId": 40}
    await harness.post(message_xml(CORP_ID, "lisi", AGENT_ID, video))
    await harness.settle()
    assert harness.submitter.received == []
    expected = [i18n.text("media.voice_no_transcript", "zh-CN"), i18n.text("media.unsupported", "zh-CN", kind="video")]
    assert sorted(api.texts()) == sorted(expected)


async def test_app_images_from_many_users_at_once_each_reach_their_own_message(
    harness: Harness, api: FakeQyApi
) -> None:
    images = {f"user{i}": b"\x89PNG\r\n\x1a\n" + os.urandom(3000 + i) for i in range(8)}
    for user, data in images.items():
        api.add_media(f"MID-{user}", data, filename=f"{user}.png", content_type="image/png")
    api.media.hold = asyncio.Event()
    await harness.start()
    for n, user in enumerate(images):
        fields: dict[str, str | int] = {"MsgType": "image", "MediaId": f"MID-{user}", "PicUrl": "u", "MsgId": 100 + n}
        await harness.post(message_xml(CORP_ID, user, AGENT_ID, fields))
    await api.media.wait_held(len(images))
    api.media.hold.set()  # every download answers at the same moment
    await harness.settle()
    got = {m.sender_id: m.attachments[0].data for m in harness.submitter.received}
    assert got == images


# ---------------------------------------------------------------- AI bot: encrypted media urls


@pytest.fixture
async def bot(server: FakeAiBotServer, tmp_path: Path) -> AsyncIterator[BotHarness]:
    h = BotHarness(server, ScriptedSubmitter(), tmp_path)
    yield h
    if h.channel is not None:
        await h.channel.stop()


def bot_body(msgid: str, msgtype: str, content: object, *, user: str = "zhangsan") -> dict[str, object]:
    body = {"msgid": msgid, "aibotid": "aib", "chattype": "single", "from": {"userid": user}, "msgtype": msgtype}
    return {**body, msgtype: content}


async def final_text(server: FakeAiBotServer, req_id: str) -> str:
    await server.wait_for(lambda: any(s["finish"] for s in server.streams(req_id)))
    return str(server.streams(req_id)[-1]["content"])


def submitted(bot: BotHarness) -> ScriptedSubmitter:
    assert isinstance(bot.gateway, ScriptedSubmitter)
    return bot.gateway


async def test_bot_image_is_downloaded_decrypted_and_submitted(bot: BotHarness, server: FakeAiBotServer) -> None:
    await bot.start()
    req_id = await server.send_message(bot_body("b-img", "image", server.add_media(PNG)))
    await final_text(server, req_id)
    (message,) = submitted(bot).received
    (attachment,) = message.attachments
    assert (attachment.kind, attachment.mime_type, attachment.data) == ("image", "image/png", PNG)
    assert attachment.name.endswith(".png")


async def test_bot_mixed_message_brings_its_text_and_every_image_in_order(
    bot: BotHarness, server: FakeAiBotServer
) -> None:
    await bot.start()
    items = [
        {"msgtype": "text", "text": {"content": "看看这张图"}},
        {"msgtype": "image", "image": server.add_media(PNG)},
        {"msgtype": "text", "text": {"content": "还有这张"}},
        {"msgtype": "image", "image": server.add_media(JPEG)},
    ]
    req_id = await server.send_message(bot_body("b-mixed", "mixed", {"msg_item": items}))
    await final_text(server, req_id)
    (message,) = submitted(bot).received
    assert message.content == "看看这张图\n还有这张"
    assert [(a.kind, a.mime_type, a.data) for a in message.attachments] == [
        ("image", "image/png", PNG),
        ("image", "image/jpeg", JPEG),
    ]


async def test_bot_malformed_mixed_items_are_skipped_not_a_crash(bot: BotHarness, server: FakeAiBotServer) -> None:
    await bot.start()
    items = ["junk", {"msgtype": "text", "text": "not an object"}, {"msgtype": "text", "text": {"content": "还在"}}]
    req_id = await server.send_message(bot_body("b-junk", "mixed", {"msg_item": items}))
    await final_text(server, req_id)
    assert [m.content for m in submitted(bot).received] == ["还在"]


async def test_bot_file_arrives_with_its_name(bot: BotHarness, server: FakeAiBotServer) -> None:
    data = b"name,dept\n" + os.urandom(50000)
    await bot.start()
    req_id = await server.send_message(bot_body("b-file", "file", server.add_media(data, filename="名单 2026.csv")))
    await final_text(server, req_id)
    (attachment,) = submitted(bot).received[0].attachments
    assert (attachment.kind, attachment.name, attachment.mime_type) == ("file", "名单 2026.csv", "text/csv")
    assert attachment.data == data


@pytest.mark.parametrize(("locale", "expected"), [(None, "zh-CN"), ("en", "en")])
async def test_bot_30mb_file_is_refused_with_a_clear_reply(
    bot: BotHarness, server: FakeAiBotServer, locale: str | None, expected: str
) -> None:
    bot.locale = locale
    await bot.start()
    media = server.add_media(os.urandom(30 * MiB), filename="big.zip")
    req_id = await server.send_message(bot_body("b-big", "file", media))
    assert await final_text(server, req_id) == too_large(expected, "file", "30")
    assert submitted(bot).received == []
    assert next(iter(server.media.bytes_sent.values())) < 30 * MiB


async def test_bot_bad_aes_key_expired_url_and_timeout_get_the_clear_reply(
    bot: BotHarness, server: FakeAiBotServer
) -> None:
    bot.media = {"download_timeout_s": 0.5}
    await bot.start()
    wrong_key = server.with_wrong_key(server.add_media(PNG))
    gone = {**server.add_media(PNG), "url": f"http://127.0.0.1:{server.port}/media/expired"}
    replies = [
        await final_text(server, await server.send_message(bot_body("b-aes", "image", wrong_key))),
        await final_text(server, await server.send_message(bot_body("b-404", "file", gone))),
    ]
    server.media.delay_s = 2.0
    slow = server.add_media(JPEG)
    replies.append(await final_text(server, await server.send_message(bot_body("b-slow", "image", slow))))
    assert replies == [download_failed("zh-CN", kind) for kind in ("image", "file", "image")]
    assert submitted(bot).received == []


async def test_bot_mixed_message_with_one_failed_image_is_not_half_submitted(
    bot: BotHarness, server: FakeAiBotServer
) -> None:
    await bot.start()
    items = [
        {"msgtype": "text", "text": {"content": "两张图"}},
        {"msgtype": "image", "image": server.add_media(PNG)},
        {"msgtype": "image", "image": server.with_wrong_key(server.add_media(JPEG))},
    ]
    req_id = await server.send_message(bot_body("b-mixed-bad", "mixed", {"msg_item": items}))
    assert await final_text(server, req_id) == download_failed("zh-CN", "image")
    assert submitted(bot).received == []


async def test_bot_voice_without_transcript_and_video_get_clear_replies(
    bot: BotHarness, server: FakeAiBotServer
) -> None:
    bot.locale = "en"
    await bot.start()
    voice = await final_text(server, await server.send_message(bot_body("b-voice", "voice", {"content": ""})))
    video = await final_text(server, await server.send_message(bot_body("b-video", "video", server.add_media(PNG))))
    assert voice == i18n.text("media.voice_no_transcript", "en")
    assert video == i18n.text("media.unsupported", "en", kind="video")
    assert submitted(bot).received == []


async def test_bot_mixed_message_images_are_held_within_the_download_limit_together(
    bot: BotHarness, server: FakeAiBotServer
) -> None:
    """Each picture is under the limit, but the message holds them all in memory: together they are bounded too."""
    bot.media = {"max_download_bytes": 1 * MiB}
    await bot.start()
    big = b"\x89PNG\r\n\x1a\n" + os.urandom(700 * 1024)
    items = [{"msgtype": "image", "image": server.add_media(big)}, {"msgtype": "image", "image": server.add_media(big)}]
    req_id = await server.send_message(bot_body("b-mixed-big", "mixed", {"msg_item": items}))
    assert await final_text(server, req_id) == too_large("zh-CN", "image", "> 1", "1")
    assert submitted(bot).received == []


# ---------------------------------------------------------------- arrival order behind a slow download


async def test_app_messages_of_one_user_reach_the_agent_in_order_behind_a_slow_download(
    harness: Harness, api: FakeQyApi
) -> None:
    api.add_media("MID-slow", PNG, filename="slow.png", content_type="image/png")
    release = api.media.holds["MID-slow"] = asyncio.Event()
    await harness.start()
    await harness.post(app_media("image", "MID-slow", 51))
    await api.media.wait_held(1)
    await harness.post(text("这张图是什么？", msg_id=52, user="lisi"))
    await harness.post(text("另一个人", msg_id=53, user="wangwu"))
    await harness.submitter.wait_for(1)  # another user's chat is not held up by lisi's download
    release.set()
    await harness.settle()
    assert [(m.sender_id, m.message_id) for m in harness.submitter.received] == [
        ("wangwu", "53"),
        ("lisi", "51"),
        ("lisi", "52"),
    ]


async def test_bot_messages_of_one_chat_reach_the_agent_in_order_behind_a_slow_download(
    bot: BotHarness, server: FakeAiBotServer
) -> None:
    await bot.start()
    media = server.add_media(PNG)
    release = server.media.holds[media["url"].rsplit("/", 1)[-1]] = asyncio.Event()
    await server.send_message(bot_body("b-slow", "image", media))
    await server.media.wait_held(1)
    await server.send_message(bot_body("b-text", "text", {"content": "这张图是什么？"}))
    await server.send_message(bot_body("b-other", "text", {"content": "另一个人"}, user="wangwu"))
    await submitted(bot).wait_for(1)  # another user's chat is not held up
    release.set()
    await bot.settle()
    assert [m.message_id for m in submitted(bot).received] == ["b-other", "b-slow", "b-text"]
