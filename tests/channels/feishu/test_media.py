"""Feishu images, files and posts with images: downloaded after the ack through the message-resource API, bounded in
size and time, handed on as Attachments; what cannot be taken in gets a clear reply in the chat's locale."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agenthub import i18n
from agenthub.config import MediaSettings
from agenthub.errors import ConfigError
from agenthub.messages import Attachment
from channels.feishu.config import parse_config
from channels.feishu.inbound import parse_message_event, render_text
from channels.feishu.media import MediaRef, media_refs
from tests.support.fakes.feishu import FakeFeishu, Harness, message_event, running_channel
from tests.support.fakes.feishu_resources import Resource
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.feishu import APP, APP_ID, SECRET, TOKEN, post_event

MiB = 1024 * 1024
PNG_A = b"\x89PNG\r\n\x1a\n" + b"picture-a" * 50
PNG_B = b"\x89PNG\r\n\x1a\n" + b"picture-b" * 70
JPEG_C = b"\xff\xd8\xff\xe0" + b"picture-c" * 90
PDF = b"%PDF-1.7\n" + "季度报告".encode() * 100


@asynccontextmanager
async def harness(
    tmp_path: Path, gateway: Any, *, locale: str | None = None, media: MediaSettings | None = None
) -> AsyncIterator[Harness]:
    top = {"locale": locale} if locale is not None else {}
    settings = {"media": media} if media is not None else {}
    async with (
        FakeFeishu({APP_ID: SECRET}) as fake,
        running_channel(fake, tmp_path, {"main": APP}, gateway, settings=settings, **top) as h,
    ):
        yield h


def event(message_type: str, content: dict[str, Any], message_id: str) -> dict[str, Any]:
    return message_event(
        "", token=TOKEN, app_id=APP_ID, message_type=message_type, content=content, message_id=message_id
    )


def reply_texts(h: Harness) -> list[str]:
    """The plain-text replies (not the streaming cards of answered turns)."""
    return [str(m.content["text"]) for m in h.fake.replies() if m.msg_type == "text"]


async def test_an_image_a_file_and_a_post_with_two_images_reach_the_agent_as_their_bytes_and_text(
    tmp_path: Path,
) -> None:
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway) as h:
        resources = h.fake.resources
        resources.add("om_img", "img_v3_a", Resource("image", PNG_A, "image/png"))
        resources.add("om_file", "file_v3_b", Resource("file", PDF, "application/pdf", "季度报告.pdf"))
        resources.add("om_post", "img_v3_b", Resource("image", PNG_B, "image/png"))
        resources.add("om_post", "img_v3_c", Resource("image", JPEG_C, "image/jpeg"))
        resources.hold()  # a slow download must not hold up the ack
        post = {
            "title": "周报",
            "content": [
                [{"tag": "text", "text": "先看这张"}],
                [{"tag": "img", "image_key": "img_v3_b", "width": 300, "height": 200}],
                [{"tag": "text", "text": "再看这张，"}, {"tag": "a", "text": "链接", "href": "https://e.com"}],
                [{"tag": "img", "image_key": "img_v3_c", "width": 300, "height": 200}],
                [{"tag": "text", "text": "有什么问题？"}],
            ],
        }
        for status in [
            (await post_event(h, event("image", {"image_key": "img_v3_a"}, "om_img")))[0],
            (await post_event(h, event("file", {"file_key": "file_v3_b", "file_name": "季度报告.pdf"}, "om_file")))[0],
            (await post_event(h, event("post", post, "om_post")))[0],
        ]:
            assert status == 200
        assert gateway.received == []
        resources.release()
        await gateway.wait_for(3)
    image, file, with_images = gateway.received  # one chat: in the order they were sent
    assert image.content == "" and image.attachments == (Attachment("image", "img_v3_a.png", "image/png", PNG_A),)
    assert file.content == "" and file.attachments == (Attachment("file", "季度报告.pdf", "application/pdf", PDF),)
    assert with_images.content == "周报\n先看这张\n\n再看这张，[链接](https://e.com)\n\n有什么问题？"
    assert [(a.kind, a.mime_type, a.data) for a in with_images.attachments] == [
        ("image", "image/png", PNG_B),
        ("image", "image/jpeg", JPEG_C),
    ]
    assert sorted(resources.gets) == sorted(
        [
            ("om_img", "img_v3_a", "image"),
            ("om_file", "file_v3_b", "file"),
            ("om_post", "img_v3_b", "image"),
            ("om_post", "img_v3_c", "image"),
        ]
    )


async def test_a_slow_download_holds_back_only_its_own_chat(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway) as h:
        fake = h.fake
        fake.resources.add("om_pic", "img_v3_a", Resource("image", PNG_A, "image/png"))
        fake.resources.hold()
        await post_event(h, event("image", {"image_key": "img_v3_a"}, "om_pic"))  # ou_user1's chat
        await fake.wait_until(lambda: len(fake.resources.gets) == 1)
        same_chat = message_event("然后呢", token=TOKEN, app_id=APP_ID)
        other_chats = [message_event(f"我是 {n}", token=TOKEN, app_id=APP_ID, sender=f"ou_{n}") for n in range(5)]
        for payload in [same_chat, *other_chats]:
            await post_event(h, payload)
        await gateway.wait_for(5)
        assert sorted(m.content for m in gateway.received) == sorted(f"我是 {n}" for n in range(5))
        fake.resources.release()
        await gateway.wait_for(7)
    assert [m.content for m in gateway.received[5:]] == ["", "然后呢"]  # its chat: still in arrival order
    assert gateway.received[5].attachments[0].data == PNG_A


async def test_a_download_renews_a_token_feishu_no_longer_accepts_and_waits_out_a_rate_limit(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway) as h:
        fake = h.fake
        fake.resources.add("om_img", "img_v3_a", Resource("image", PNG_A, "image/png"))
        fake.tokens.clear()  # the cached tenant token expired early on Feishu's side
        fake.rate_limit = {"message_resource": 2}  # and the app is over its 50 calls/s for a moment
        await post_event(h, event("image", {"image_key": "img_v3_a"}, "om_img"))
        await gateway.wait_for(1)
    assert gateway.received[0].attachments[0].data == PNG_A
    assert fake.token_fetches[APP_ID] == 2 and fake.rate_limited == ["message_resource"] * 2
    assert fake.resources.gets == [("om_img", "img_v3_a", "image")]


@pytest.mark.parametrize(("locale", "expected_locale"), [(None, "zh-CN"), ("en", "en")])
async def test_a_30_mb_file_is_refused_with_a_clear_reply_in_the_chats_locale(
    tmp_path: Path, locale: str | None, expected_locale: str
) -> None:
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway, locale=locale) as h:
        big = Resource("file", b"\0" * (30 * MiB), "application/zip", "dump.zip")
        h.fake.resources.add("om_big", "file_big", big)
        await post_event(h, event("file", {"file_key": "file_big", "file_name": "dump.zip"}, "om_big"))
        await h.fake.wait_until(lambda: len(h.fake.replies()) == 1)
    assert gateway.received == []
    what = i18n.text("media.what.file", expected_locale)
    expected = i18n.text("media.too_large", expected_locale, what=what, size_mb="30", limit_mb="20")
    assert reply_texts(h) == [expected]
    assert ("太大" in expected) == (expected_locale == "zh-CN") and ("too large" in expected) == (
        expected_locale == "en"
    )
    assert h.fake.replies()[0].target == "om_big"


async def test_a_body_without_a_length_is_read_only_up_to_the_limit(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway, locale="en") as h:
        endless = Resource("file", b"x" * MiB, "application/octet-stream", "huge.bin", chunked_size=100 * MiB)
        h.fake.resources.add("om_huge", "file_huge", endless)
        await post_event(h, event("file", {"file_key": "file_huge", "file_name": "huge.bin"}, "om_huge"))
        await h.fake.wait_until(lambda: len(h.fake.replies()) == 1)
    assert gateway.received == [] and h.fake.resources.completed == []  # it stopped reading: never sent whole
    what = i18n.text("media.what.file", "en")
    assert reply_texts(h) == [i18n.text("feishu.media_over_limit", "en", what=what, limit_mb="20")]


async def test_a_download_refused_by_feishu_or_too_slow_gets_a_clear_reply_and_the_channel_goes_on(
    tmp_path: Path,
) -> None:
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway, media=MediaSettings(download_timeout_s=0.3)) as h:
        fake = h.fake
        fake.resources.add("om_slow", "img_slow", Resource("image", PNG_A, "image/png"))
        await post_event(h, event("image", {"image_key": "img_gone"}, "om_gone"))  # 234003 File not in msg
        await fake.wait_until(lambda: len(fake.replies()) == 1)
        fake.resources.hold()
        await post_event(h, event("image", {"image_key": "img_slow"}, "om_slow"))
        await fake.wait_until(lambda: len(fake.replies()) == 2)
        fake.resources.release()
        await post_event(h, message_event("还在吗", token=TOKEN, app_id=APP_ID))
        await gateway.wait_for(1)
        await fake.wait_until(lambda: fake.closed_cards() == 1)
    failed = i18n.text("media.download_failed", "zh-CN", what=i18n.text("media.what.image", "zh-CN"))
    assert reply_texts(h) == [failed, failed]
    assert [m.target for m in fake.replies() if m.msg_type == "text"] == ["om_gone", "om_slow"]
    assert [m.content for m in gateway.received] == ["还在吗"]
    assert all("234003" not in text and "Timeout" not in text for text in reply_texts(h))


@pytest.mark.parametrize(
    ("message_type", "content", "key", "params"),
    [
        ("audio", {"file_key": "file_v3_voice", "duration": 3000}, "media.voice_no_transcript", {}),
        ("sticker", {"file_key": "file_v3_sticker"}, "media.unsupported", {"kind": "feishu.kind.sticker"}),
        (
            "media",
            {"file_key": "file_v3_video", "image_key": "img_cover"},
            "media.unsupported",
            {"kind": "feishu.kind.media"},
        ),
    ],
)
async def test_voice_stickers_and_videos_get_the_unsupported_reply_without_a_download(
    tmp_path: Path, message_type: str, content: dict[str, Any], key: str, params: dict[str, str]
) -> None:
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway, locale="en") as h:
        await post_event(h, event(message_type, content, f"om_{message_type}"))
        await h.fake.wait_until(lambda: len(h.fake.replies()) == 1)
    expected = i18n.text(key, "en", **{k: i18n.text(v, "en") for k, v in params.items()})
    assert reply_texts(h) == [expected] and gateway.received == [] and h.fake.resources.gets == []


def test_a_posts_images_are_found_in_a_locale_wrapper_too_and_other_types_carry_none() -> None:
    wrapped = {
        "en_us": {
            "title": "",
            "content": [
                [{"tag": "img", "image_key": "img_1"}, {"tag": "text", "text": "and"}],
                [{"tag": "media", "file_key": "file_video", "image_key": "img_cover"}, {"tag": "img", "image_key": ""}],
                [{"tag": "img", "image_key": "img_2"}],
            ],
        }
    }
    post = parse_message_event(event("post", wrapped, "om_w"))
    assert media_refs(post) == (MediaRef("image", "img_1"), MediaRef("image", "img_2"))
    assert render_text(post, "ou_bot") == "and"
    assert media_refs(parse_message_event(event("audio", {"file_key": "f", "duration": 1}, "om_a"))) == ()
    file = parse_message_event(event("file", {"file_key": "file_1", "file_name": "a.txt"}, "om_f"))
    assert media_refs(file) == (MediaRef("file", "file_1", "a.txt"),)


@pytest.mark.parametrize("locale", ["en", "zh_CN", "zh-CN"])
def test_the_channel_locale_is_a_known_one(locale: str) -> None:
    assert parse_config({"locale": locale}).locale == locale
    with pytest.raises(ConfigError, match="locale"):
        parse_config({"locale": "klingon"})


async def test_the_images_of_one_post_are_held_within_the_download_limit_together(tmp_path: Path) -> None:
    """Each picture of a post is under the limit, but the message holds them all in memory: together they are
    bounded by it too (the second of two 12 MiB pictures is refused, and the message with it)."""
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway, locale="en") as h:
        for key in ("img_big_a", "img_big_b"):
            h.fake.resources.add(
                "om_two", key, Resource("image", b"\x89PNG\r\n\x1a\n" + b"\0" * (12 * MiB), "image/png")
            )
        post = {"title": "", "content": [[{"tag": "img", "image_key": k}] for k in ("img_big_a", "img_big_b")]}
        await post_event(h, event("post", post, "om_two"))
        await h.fake.wait_until(lambda: len(h.fake.replies()) == 1)
    assert gateway.received == []
    what = i18n.text("media.what.image", "en")
    assert reply_texts(h) == [i18n.text("feishu.media_over_limit", "en", what=what, limit_mb="20")]
