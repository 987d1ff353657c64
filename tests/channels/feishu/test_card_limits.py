"""Feishu card limits and fallbacks: a failed card is per turn, notices stay, 30 KB and one table per card."""

from __future__ import annotations

from pathlib import Path

import pytest

from channels.feishu.format import plan_reply
from channels.toolkit.notices import with_notices
from tests.support.fakes.feishu import FakeFeishu, message_event
from tests.support.fakes.feishu_cards import CARD_MAX_BYTES, count_tables
from tests.support.fakes.feishu_harness import NoticingSubmitter
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.feishu import APP, APP_ID, TOKEN, cards_for, harness, plain_replies, post_event

TWO_TABLES = (
    "对比如下：\n\n| 方案 | 成本 |\n|---|---|\n| A | 1 |\n| B | 2 |\n\n"
    "再看时间：\n\n| 方案 | 天数 |\n| --- | --- |\n| A | 3 |\n| B | 4 |\n\n结论：选 A。"
)


def long_answer(target_bytes: int) -> str:
    """Mixed Chinese and ASCII prose in paragraphs, about `target_bytes` of UTF-8."""
    lines: list[str] = []
    size = 0
    while size < target_bytes:
        line = f"第{len(lines)}行：数据分析结果 value={len(lines) * 7} " + "测试内容" * 6
        lines.append(line + ("\n" if len(lines) % 5 else "\n\n"))
        size += len(lines[-1].encode())
    return "".join(lines)


@pytest.mark.parametrize(("code", "cards_stay_on"), [(230099, True), (99991672, False), (200340, False)])
async def test_only_a_permission_error_turns_cards_off_a_failed_create_falls_back_once(
    tmp_path: Path, code: int, cards_stay_on: bool
) -> None:
    async with harness(tmp_path, ScriptedSubmitter()) as h:
        fake = h.fake
        fake.fail_ops, fake.fail_code = {"card_create": 1}, {"card_create": code}
        first = message_event("one", token=TOKEN, app_id=APP_ID)
        first_id = first["event"]["message"]["message_id"]
        await post_event(h, first)
        await fake.wait_until(lambda: bool(plain_replies(fake, first_id)))
        second = message_event("two", token=TOKEN, app_id=APP_ID)
        second_id = second["event"]["message"]["message_id"]
        await post_event(h, second)
        await fake.wait_until(lambda: bool(cards_for(fake, second_id) or plain_replies(fake, second_id)))
        await fake.wait_until(lambda: all(not c.streaming for c in fake.cards.values()))
        assert h.channel.apps["main"].cards_enabled is cards_stay_on
    assert [m.content for m in plain_replies(fake, first_id)] == [{"text": "echo: one"}]
    if cards_stay_on:  # the next turn streams a card again
        [card] = cards_for(fake, second_id)
        assert card.content == "echo: two" and plain_replies(fake, second_id) == []
    else:
        assert cards_for(fake, second_id) == []
        assert [m.content for m in plain_replies(fake, second_id)] == [{"text": "echo: two"}]


@pytest.mark.parametrize("streaming_card", [True, False])
async def test_notices_stay_above_the_final_card_and_the_fallback_reply(tmp_path: Path, streaming_card: bool) -> None:
    notices = ["Queued behind 1 earlier message(s) in this chat.", "Model 'x' is not available; using 'y'."]
    gateway = NoticingSubmitter(chunks=3, delay_s=0.02, notices=notices)
    app = {**APP, "streaming_card": streaming_card}
    async with harness(tmp_path, gateway, apps={"main": app}) as h:
        fake = h.fake
        event = message_event("hi", token=TOKEN, app_id=APP_ID)
        message_id = event["event"]["message"]["message_id"]
        await post_event(h, event)
        if streaming_card:
            await fake.wait_until(lambda: fake.closed_cards() == 1)
        else:
            await fake.wait_until(lambda: bool(plain_replies(fake, message_id)))
    expected = with_notices("echo: hi", notices)
    if streaming_card:
        [card] = cards_for(fake, message_id)
        assert card.content == expected and card.full_updates[-1][1] == expected
        assert plain_replies(fake, message_id) == []
    else:
        [reply] = plain_replies(fake, message_id)
        assert reply.content == {"text": expected}


async def test_an_80_kb_answer_streams_into_several_cards_holding_it_exactly_once(tmp_path: Path) -> None:
    answer = long_answer(80 * 1024)
    gateway = ScriptedSubmitter(chunks=40, delay_s=0.01, reply_for=lambda m: answer)
    async with harness(tmp_path, gateway) as h:
        fake = h.fake
        event = message_event("long please", token=TOKEN, app_id=APP_ID)
        message_id = event["event"]["message"]["message_id"]
        await post_event(h, event)
        await fake.wait_until(lambda: fake.closed_cards() >= 4 and all(not c.streaming for c in fake.cards.values()))
    cards = cards_for(fake, message_id)
    assert len(cards) >= 4 and all(not c.streaming for c in cards)
    assert "".join(c.content for c in cards) == answer  # every character once, in order
    assert plain_replies(fake, message_id) == [] and fake.sequence_errors == []
    assert all(len(c.content.encode()) <= CARD_MAX_BYTES for c in cards)


async def test_an_80_kb_answer_without_cards_goes_out_as_posts_holding_it_once(tmp_path: Path) -> None:
    answer = long_answer(80 * 1024)
    gateway = ScriptedSubmitter(reply_for=lambda m: answer)
    async with harness(tmp_path, gateway, apps={"main": {**APP, "streaming_card": False}}) as h:
        fake = h.fake
        event = message_event("long please", token=TOKEN, app_id=APP_ID)
        message_id = event["event"]["message"]["message_id"]
        await post_event(h, event)
        await fake.wait_until(lambda: len("\n".join(post_texts(fake, message_id))) >= len(answer))
    assert len(post_texts(fake, message_id)) >= 2
    assert "\n".join(post_texts(fake, message_id)) == answer  # split at line breaks: each part once


def post_texts(fake: FakeFeishu, message_id: str) -> list[str]:
    return [m.content["zh_cn"]["content"][0][0]["text"] for m in plain_replies(fake, message_id)]


async def test_a_streamed_answer_with_two_tables_gets_one_card_per_table(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter(chunks=12, delay_s=0.02, reply_for=lambda m: TWO_TABLES)
    async with harness(tmp_path, gateway) as h:
        fake = h.fake
        event = message_event("compare", token=TOKEN, app_id=APP_ID)
        message_id = event["event"]["message"]["message_id"]
        await post_event(h, event)
        await fake.wait_until(lambda: fake.closed_cards() >= 2 and all(not c.streaming for c in fake.cards.values()))
    cards = cards_for(fake, message_id)
    assert [count_tables(c.content) for c in cards] == [1, 1]
    assert "".join(c.content for c in cards) == TWO_TABLES
    assert plain_replies(fake, message_id) == [] and fake.sequence_errors == []


async def test_a_normal_reply_with_two_tables_is_two_cards(tmp_path: Path) -> None:
    planned = plan_reply(TWO_TABLES)
    assert [fmt for fmt, _ in planned] == ["card", "card"]
    assert [count_tables(chunk) for _, chunk in planned] == [1, 1]
    async with harness(
        tmp_path, ScriptedSubmitter(reply_for=lambda m: TWO_TABLES), apps={"main": {**APP, "streaming_card": False}}
    ) as h:
        fake = h.fake
        event = message_event("compare", token=TOKEN, app_id=APP_ID)
        message_id = event["event"]["message"]["message_id"]
        await post_event(h, event)
        await fake.wait_until(lambda: len(fake.replies()) >= 2)
    sent = [m for m in fake.replies() if m.target == message_id]
    assert [m.msg_type for m in sent] == ["interactive", "interactive"]  # no refusal, no plain-text fallback
    assert [count_tables(m.content["body"]["elements"][0]["content"]) for m in sent] == [1, 1]
