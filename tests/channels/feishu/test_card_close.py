"""Closing a streaming card: one full card update with the final text, else content + settings as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agenthub import i18n
from tests.support.fakes.feishu import FakeCard, FakeFeishu, StoppableSubmitter, message_event
from tests.support.fakes.feishu_harness import running_channel
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.feishu import APP, APP_ID, SECRET, TOKEN, harness, post_event


def ops(fake: FakeFeishu) -> list[str]:
    return [op for op, _, _ in fake.calls if op.startswith("card_")]


def without_text(card: dict[str, Any]) -> dict[str, Any]:
    """The card's shape with what may differ between open and close (text, streaming flag, summary) blanked."""
    config = {k: v for k, v in card["config"].items() if k not in ("streaming_mode", "summary")}
    elements = [{k: v for k, v in e.items() if k != "content"} for e in card["body"]["elements"]]
    return {**card, "config": config, "body": {**card["body"], "elements": elements}}


def assert_sequences_rise(fake: FakeFeishu, card: FakeCard) -> None:
    assert card.sequences == sorted(set(card.sequences)) and fake.sequence_errors == []


async def test_a_normal_turn_ends_with_exactly_one_full_update_and_no_settings_call(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter(chunks=5, delay_s=0.06, reply_for=lambda m: "第一段。" * 10)
    async with harness(tmp_path, gateway) as h:
        fake = h.fake
        event = message_event("go", token=TOKEN, app_id=APP_ID)
        await post_event(h, event)
        await fake.wait_until(lambda: fake.closed_cards() == 1)
    card = fake.card_for_reply(event["event"]["message"]["message_id"])
    assert card.updates, "the answer streamed through content updates first"
    [(_, text, streaming)] = card.full_updates
    assert (text, streaming, card.content, card.streaming) == ("第一段。" * 10, False, "第一段。" * 10, False)
    assert ops(fake).count("card_update") == 1 and ops(fake)[-1] == "card_update"
    assert "card_settings" not in ops(fake) and card.settings == []
    [final] = card.full_cards
    assert final["config"]["streaming_mode"] is False and final["config"]["summary"]["content"].startswith("第一段")
    assert without_text(final) == without_text(card.card)  # one card shape, built in one place
    assert_sequences_rise(fake, card)
    assert [m for m in fake.replies() if m.msg_type != "interactive"] == []


@pytest.mark.parametrize("failure", ["refused", "rate_limited_past_retries"])
async def test_a_failing_full_update_falls_back_to_content_and_settings(tmp_path: Path, failure: str) -> None:
    gateway = ScriptedSubmitter(chunks=4, delay_s=0.03, reply_for=lambda m: "full answer text")
    async with harness(tmp_path, gateway) as h:
        fake = h.fake
        if failure == "refused":
            fake.fail_ops = {"card_update": 1}
        else:
            fake.rate_limit = {"card_update": 4}  # the first try and all three retries: the gate gives up
        event = message_event("go", token=TOKEN, app_id=APP_ID)
        await post_event(h, event)
        await fake.wait_until(lambda: fake.closed_cards() == 1)
    card = fake.card_for_reply(event["event"]["message"]["message_id"])
    assert card.full_updates == [] and card.streaming is False
    assert card.content == "full answer text" and card.updates[-1][1] == "full answer text"
    assert card.settings[-1]["config"]["streaming_mode"] is False
    tried = ops(fake)
    assert tried.count("card_update") == (1 if failure == "refused" else 4)
    last_try = len(tried) - 1 - tried[::-1].index("card_update")
    assert tried[last_try + 1 :] == ["card_content", "card_settings"]  # the fallback, after the last try
    assert_sequences_rise(fake, card)
    assert [m for m in fake.replies() if m.msg_type != "interactive"] == []  # the card showed it: no extra reply


async def test_stop_closes_the_card_with_one_full_update_carrying_the_stop_note(tmp_path: Path) -> None:
    gateway = StoppableSubmitter(chunks=40, delay_s=0.05, reply_for=lambda m: "x" * 400 if m.content == "go" else "ok")
    async with harness(tmp_path, gateway) as h:
        fake = h.fake
        first = message_event("go", token=TOKEN, app_id=APP_ID)
        await post_event(h, first)
        await fake.wait_until(lambda: any(c.updates for c in fake.cards.values()))
        await post_event(h, message_event("/stop", token=TOKEN, app_id=APP_ID))
        await fake.wait_until(lambda: fake.closed_cards() == 2)
    card = fake.card_for_reply(first["event"]["message"]["message_id"])
    shown = card.updates[-1][1]
    [(_, text, streaming)] = card.full_updates
    assert streaming is False and card.streaming is False and card.settings == []
    assert text.startswith(shown) and text.endswith("> ⚠️ 已停止 (stopped)") and len(text) < 400 + 40
    assert card.content == text
    assert_sequences_rise(fake, card)


@pytest.mark.parametrize(("top", "locale"), [({}, "zh-CN"), ({"locale": "en"}, "en")])
async def test_a_streaming_cards_chat_list_summary_is_in_the_channels_locale(
    tmp_path: Path, top: dict[str, Any], locale: str
) -> None:
    gateway = ScriptedSubmitter(chunks=3, delay_s=0.03, reply_for=lambda m: "answer")
    async with (
        FakeFeishu({APP_ID: SECRET}) as fake,
        running_channel(fake, tmp_path, {"main": APP}, gateway, **top) as h,
    ):
        event = message_event("go", token=TOKEN, app_id=APP_ID)
        await post_event(h, event)
        await fake.wait_until(lambda: fake.closed_cards() == 1)
    card = fake.card_for_reply(event["event"]["message"]["message_id"])
    assert card.card["config"]["summary"]["content"] == i18n.text("channel.generating", locale)
