"""Images and files users send reach the model through a real turn; the history keeps references, never bytes."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from agenthub import i18n
from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_gateway
from agenthub.media.images import ImageRejectedError, prepare_image
from agenthub.messages import Attachment, DoneEvent, ErrorEvent, InboundMessage, NoticeEvent
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, http_error, reply_text, reply_tool
from tests.support.media import image_blocks, png
from tests.support.memory import is_summary_request, summaries_then_default
from tests.support.paths import DATA

CHAT = "c1"


def image_message(data: bytes, text: str = "what is in this picture?", *, name: str = "photo.png") -> InboundMessage:
    return InboundMessage("cli", CHAT, "u1", text, attachments=(Attachment("image", name, "image/png", data),))


def file_message(data: bytes, name: str, text: str = "", mime: str = "text/plain") -> InboundMessage:
    return InboundMessage("cli", CHAT, "u1", text, attachments=(Attachment("file", name, mime, data),))


def request_text(body: dict[str, Any]) -> str:
    return json.dumps(body["messages"], ensure_ascii=False)


def decoded(block: dict[str, Any]) -> Image.Image:
    source = block["source"]
    assert source["type"] == "base64" and source["media_type"] in {"image/jpeg", "image/png", "image/gif", "image/webp"}
    image = Image.open(io.BytesIO(base64.b64decode(source["data"])))
    image.load()
    assert Image.MIME[image.format or ""] == source["media_type"]
    return image


def history_text(settings: Settings) -> str:
    sessions = settings.data_dir / "default" / "sessions"
    return "".join(p.read_text(encoding="utf-8") for p in sorted(sessions.rglob("*.jsonl")))


def inbox(settings: Settings) -> Path:
    return settings.workspace_dir / "default" / "inbox" / "cli_c1"


async def answer(gw: GatewayCore, message: InboundMessage) -> DoneEvent | ErrorEvent:
    final = await (await gw.submit(message)).result()
    assert isinstance(final, DoneEvent | ErrorEvent)
    return final


async def test_an_image_reaches_the_model_as_an_image_block(settings: Settings, fake_llm: FakeAnthropic) -> None:
    async with build_gateway(settings) as gw:
        final = await answer(gw, image_message(png(64, 48)))
    assert isinstance(final, DoneEvent)
    [request] = fake_llm.message_requests()
    assert request.body is not None
    [block] = image_blocks(request.body)
    assert decoded(block).size == (64, 48)
    kinds = [b["type"] for b in request.body["messages"][-1]["content"]]
    assert kinds[0] == "image" and request.body["messages"][-1]["content"][1]["text"] == "what is in this picture?"


async def test_a_big_png_is_resized_and_re_encoded_under_the_limits(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory(media={"max_image_bytes": 400_000})
    big = png(2400, 1600, noise=True)
    assert len(big) > 10_000_000
    async with build_gateway(settings) as gw:
        assert isinstance(await answer(gw, image_message(big)), DoneEvent)
    [request] = fake_llm.message_requests()
    assert request.body is not None
    [block] = image_blocks(request.body)
    raw = base64.b64decode(block["source"]["data"])
    assert len(raw) <= 400_000
    assert max(decoded(block).size) <= settings.media.max_image_edge_px


async def test_the_history_keeps_a_reference_and_a_reload_still_sends_the_image(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    picture = png(80, 60)
    async with build_gateway(settings) as gw:
        await answer(gw, image_message(picture))
    stored = history_text(settings)
    sent = image_blocks(fake_llm.message_requests()[0].body or {})[0]["source"]["data"]
    assert sent not in stored and base64.b64encode(picture).decode() not in stored
    assert "base64" not in stored and len(stored) < 2000
    async with build_gateway(settings) as gw:  # a new gateway: the history is loaded from disk
        await answer(gw, InboundMessage("cli", CHAT, "u1", "and now?"))
    second = fake_llm.message_requests()[1].body or {}
    [block] = image_blocks(second)
    assert decoded(block).size == (80, 60)


async def test_a_resent_picture_is_stored_once(settings: Settings, fake_llm: FakeAnthropic) -> None:
    picture = png(30, 30)
    async with build_gateway(settings) as gw:
        await answer(gw, image_message(picture, name="a.png"))
        await answer(gw, image_message(picture, name="b.png"))
    files = list(inbox(settings).iterdir())
    assert len(files) == 1 and re.fullmatch(r"[0-9a-f]{32}\.png", files[0].name)


async def test_a_file_lands_in_the_inbox_the_model_is_told_its_path_and_read_file_works(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    write_agent(settings.agents_dir, "default", {"tools": ["read_file"]})
    seen: list[str] = []

    def respond(body: dict[str, Any]) -> Any:
        if not seen:
            found = re.search(r"saved in your workspace at (\S+?);", request_text(body))
            assert found is not None
            seen.append(found.group(1))
            return reply_tool("read_file", {"path": found.group(1)}, tool_id="toolu_1")
        return reply_text("read it")

    fake_llm.responder = respond
    async with build_gateway(settings) as gw:
        final = await answer(gw, file_message("季度报告: 42\n".encode(), "report.txt", "please read this"))
    assert isinstance(final, DoneEvent) and final.full_text == "read it"
    assert seen == ["inbox/cli_c1/report.txt"]
    assert (inbox(settings) / "report.txt").read_text(encoding="utf-8") == "季度报告: 42\n"
    follow_up = fake_llm.message_requests()[1].body or {}
    assert "季度报告: 42" in request_text(follow_up)  # the tool result: read_file read the saved file


async def test_hostile_file_names_are_sanitised_and_collisions_get_a_suffix(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    async with build_gateway(settings) as gw:
        await answer(gw, file_message(b"one", "../../etc/passwd"))
        await answer(gw, file_message(b"two", "..\\..\\passwd"))
        await answer(gw, file_message(b"two", "passwd"))  # the same content again: stored once
        await answer(gw, file_message(b"three", "bad\x00\x07name\n.txt"))
    names = sorted(p.name for p in inbox(settings).iterdir())
    assert names == ["badname.txt", "passwd", "passwd-2"]
    assert (inbox(settings) / "passwd").read_bytes() == b"one"
    assert (inbox(settings) / "passwd-2").read_bytes() == b"two"
    assert not (settings.workspace_dir / "etc").exists()


async def test_a_corrupt_image_gets_a_clear_reply_in_the_chat_locale(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    broken = png(40, 40)[:60]  # a PNG header and nothing decodable
    async with build_gateway(settings) as gw:
        final = await answer(gw, image_message(broken, text=""))
        locale = i18n.locale_for(settings, "cli", gw.agents.get("default"))
    assert isinstance(final, ErrorEvent)
    assert final.message == i18n.text("media.image_unreadable", locale)
    assert fake_llm.message_requests() == []


async def test_a_corrupt_image_beside_text_is_announced_and_the_text_answered(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    async with build_gateway(settings) as gw:
        handle = await gw.submit(image_message(b"not an image at all", text="hello"))
        events = [event async for event in handle]
        locale = i18n.locale_for(settings, "cli", gw.agents.get("default"))
    notices = [e.text for e in events if isinstance(e, NoticeEvent)]
    assert notices == [i18n.text("media.image_unreadable", locale)]
    assert isinstance(events[-1], DoneEvent)
    [request] = fake_llm.message_requests()
    assert image_blocks(request.body or {}) == [] and "hello" in request_text(request.body or {})


FUZZED = DATA / "images"
"""Fuzzed pictures on which Pillow raises what it is not documented to (ZeroDivisionError in JPEG `draft`, a
TypeError in the TIFF decoder)."""


@pytest.mark.parametrize("name", ["fuzzed_zero_division.jpg", "fuzzed_type_error.tif"])
async def test_a_picture_that_breaks_the_decoder_is_unreadable_and_the_text_still_answered(
    settings: Settings, fake_llm: FakeAnthropic, name: str
) -> None:
    async with build_gateway(settings) as gw:
        message = image_message((FUZZED / name).read_bytes(), text="an important question", name=name)
        events = [event async for event in await gw.submit(message)]
        locale = i18n.locale_for(settings, "cli", gw.agents.get("default"))
    assert [e.text for e in events if isinstance(e, NoticeEvent)] == [i18n.text("media.image_unreadable", locale)]
    assert isinstance(events[-1], DoneEvent)
    [request] = fake_llm.message_requests()
    assert "an important question" in request_text(request.body or {})


def test_only_the_accepted_formats_are_opened() -> None:
    """A TIFF (or EPS, which would run Ghostscript) is never decoded, even a valid one."""
    out = io.BytesIO()
    Image.new("RGB", (300, 300), (5, 6, 7)).save(out, "TIFF")
    with pytest.raises(ImageRejectedError) as refused:
        prepare_image(out.getvalue(), max_bytes=3_000_000, max_edge_px=1568)
    assert refused.value.reason == "unreadable"


def test_a_flat_picture_of_too_many_pixels_is_refused_before_decoding_but_a_big_jpeg_is_decoded_scaled() -> None:
    """A PNG has no scaled decode: 41 MP (a 200 KB file) would cost hundreds of MB, so it is refused; a JPEG of
    49 MP is decoded at a fraction of its size (draft) and taken in."""
    flat = io.BytesIO()
    Image.new("1", (6400, 6400), 1).save(flat, "PNG")
    with pytest.raises(ImageRejectedError) as refused:
        prepare_image(flat.getvalue(), max_bytes=3_750_000, max_edge_px=1568)
    assert refused.value.reason == "too_big"
    photo = io.BytesIO()
    Image.new("L", (7000, 7000), 90).save(photo, "JPEG")
    prepared = prepare_image(photo.getvalue(), max_bytes=3_750_000, max_edge_px=1568)
    assert (prepared.width, prepared.height) == (1568, 1568)


async def test_a_30_mb_attachment_handed_to_the_core_is_refused(settings: Settings, fake_llm: FakeAnthropic) -> None:
    huge = b"x" * (30 * 1024 * 1024)
    async with build_gateway(settings) as gw:
        final = await answer(gw, file_message(huge, "big.bin", mime="application/octet-stream"))
        picture = await answer(gw, image_message(huge, text=""))
    assert isinstance(final, ErrorEvent) and isinstance(picture, ErrorEvent)
    assert "30" in final.message and "20" in final.message
    assert fake_llm.message_requests() == []
    assert not inbox(settings).exists() or list(inbox(settings).iterdir()) == []


async def test_compaction_of_a_session_with_images_sends_text_not_bytes(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    fake_llm.responder = summaries_then_default("用户发了几张图片。")
    async with build_gateway(settings) as gw:
        for i in range(12):
            await answer(gw, image_message(png(20 + i, 20), text=f"picture {i}"))
        for i in range(12):
            await answer(gw, InboundMessage("cli", CHAT, "u1", f"question {i}"))
        final = await answer(gw, InboundMessage("cli", CHAT, "u1", "/compact"))
        assert isinstance(final, DoneEvent) and "Compacted" in final.full_text
        await answer(gw, InboundMessage("cli", CHAT, "u1", "after"))
    summary = next(r.body for r in fake_llm.message_requests() if is_summary_request(r.body or {}))
    assert summary is not None
    text = request_text(summary)
    assert "[image" in text and "base64" not in text and "picture 0" in text
    last = fake_llm.message_requests()[-1].body or {}
    assert not is_summary_request(last) and "after" in request_text(last)


async def test_a_chat_cannot_read_or_list_another_chats_inbox(settings: Settings, fake_llm: FakeAnthropic) -> None:
    write_agent(settings.agents_dir, "default", {"tools": ["read_file", "list_dir"]})
    secret = InboundMessage(
        "cli", "alice", "alice", "", attachments=(Attachment("file", "salary.txt", "text/plain", b"SECRET-4711"),)
    )
    fake_llm.script(
        reply_text("saved"),
        reply_tool("read_file", {"path": "inbox/cli_alice/salary.txt"}, tool_id="toolu_1"),
        reply_tool("list_dir", {"path": "inbox"}, tool_id="toolu_2"),
        reply_tool("list_dir", {"path": "./inbox/../inbox/cli_alice"}, tool_id="toolu_3"),
        reply_text("done"),
        reply_tool("list_dir", {"path": "inbox/cli_alice"}, tool_id="toolu_4"),
        reply_text("mine"),
    )
    async with build_gateway(settings) as gw:
        await answer(gw, secret)
        await answer(gw, InboundMessage("cli", "bob", "bob", "what did alice send?"))
        await answer(gw, InboundMessage("cli", "alice", "alice", "list my files"))
    results = [
        b
        for r in fake_llm.message_requests()
        for m in (r.body or {})["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    by_id = {b["tool_use_id"]: b for b in results}
    for refused in ("toolu_1", "toolu_2", "toolu_3"):
        assert by_id[refused].get("is_error") is True
        assert "SECRET" not in json.dumps(by_id[refused])
    assert "alice" not in json.dumps(by_id["toolu_2"])  # the inbox's listing would name every chat
    assert "salary.txt" in json.dumps(by_id["toolu_4"]) and not by_id["toolu_4"].get("is_error")


async def test_an_inbox_that_cannot_be_written_gets_a_clear_reply_not_an_internal_error(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    (settings.workspace_dir / "default").mkdir(parents=True)
    (settings.workspace_dir / "default" / "inbox").write_text("not a directory", encoding="utf-8")
    async with build_gateway(settings) as gw:
        final = await answer(gw, file_message(b"data", "a.txt"))
        picture = await answer(gw, image_message(png(20, 20), text=""))
        locale = i18n.locale_for(settings, "cli", gw.agents.get("default"))
    whats = [i18n.text(f"media.what.{kind}", locale) for kind in ("file", "image")]
    expected = [i18n.text("media.save_failed", locale, what=what) for what in whats]
    assert isinstance(final, ErrorEvent) and isinstance(picture, ErrorEvent)
    assert [final.message, picture.message] == expected
    assert fake_llm.message_requests() == []


async def test_pictures_waiting_behind_a_turn_reach_the_model_with_the_messages_sent_together(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    release = asyncio.Event()
    fake_llm.script(reply_text("first answer", hold=release), reply_text("answer to the rest"))
    async with build_gateway(settings) as gw:
        first = await gw.submit(InboundMessage("cli", CHAT, "u1", "m0"))
        await fake_llm.wait_for_requests(1)
        waiting = [
            await gw.submit(image_message(png(21, 21), text="m1")),
            await gw.submit(InboundMessage("cli", CHAT, "u1", "m2")),
            await gw.submit(image_message(png(22, 22), text="")),
            await gw.submit(image_message(b"broken", text="")),
        ]
        release.set()  # all four are queued when the first turn ends: one turn
        finals = [await h.result() for h in [first, *waiting]]
    assert all(isinstance(f, DoneEvent) for f in finals)
    second = fake_llm.message_requests()[1].body or {}
    assert [m["role"] for m in second["messages"]] == ["user", "assistant", "user"]
    assert [decoded(b).size for b in image_blocks(second)] == [(21, 21), (22, 22)]
    assert "m1" in request_text(second) and "m2" in request_text(second)
    assert "could not be read" in request_text(second)  # the model hears that a picture did not come through


async def test_a_message_without_text_or_attachments_still_goes_to_the_model(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    async with build_gateway(settings) as gw:
        final = await answer(gw, InboundMessage("cli", CHAT, "u1", ""))
    assert isinstance(final, DoneEvent) and len(fake_llm.message_requests()) == 1


async def test_a_model_that_refuses_images_gets_them_as_text_and_the_user_is_told(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    def text_only_vendor(body: dict[str, Any]) -> Any:
        if image_blocks(body):  # like a vendor without image input: 400 on any image block
            return http_error(400, "unsupported content type: image", error_type="invalid_request_error")
        return None

    fake_llm.responder = text_only_vendor
    async with build_gateway(settings) as gw:
        handle = await gw.submit(image_message(png(30, 30), text="look"))
        events = [event async for event in handle]
        later = await answer(gw, InboundMessage("cli", CHAT, "u1", "and now?"))
        locale = i18n.locale_for(settings, "cli", gw.agents.get("default"))
    assert isinstance(events[-1], DoneEvent) and isinstance(later, DoneEvent)
    assert NoticeEvent(i18n.text("media.model_cannot_see_images", locale)) in events
    bodies = [r.body or {} for r in fake_llm.message_requests()]
    assert [bool(image_blocks(b)) for b in bodies] == [True, False, False]  # refused once, then text for this model
    assert "[image: inbox/cli_c1/" in request_text(bodies[1]) and "[image: inbox/cli_c1/" in request_text(bodies[2])


async def test_a_rejected_request_whose_images_were_not_the_cause_still_fails_and_images_stay_on(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    fake_llm.script(http_error(400, "bad"), http_error(400, "bad"))
    async with build_gateway(settings) as gw:
        final = await answer(gw, image_message(png(30, 30), text="look"))
        await answer(gw, InboundMessage("cli", CHAT, "u1", "again"))
    assert isinstance(final, ErrorEvent)
    bodies = [r.body or {} for r in fake_llm.message_requests()]
    assert [bool(image_blocks(b)) for b in bodies] == [True, False, True]
