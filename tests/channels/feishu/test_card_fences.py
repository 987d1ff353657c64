"""Code blocks cut across Feishu cards or messages: each part closes the fence and the next reopens it."""

from __future__ import annotations

from pathlib import Path

from channels.feishu.format import is_fence, plan_reply
from tests.support.fakes.feishu import message_event
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.feishu import APP_ID, TOKEN, cards_for, harness, plain_replies, post_event

OPENER = "```python"


def code_answer(code_bytes: int) -> str:
    """Prose, then a python block of about `code_bytes`, then prose: short lines, so cuts fall on line ends."""
    lines = [f"value_{i} = compute({i}, '数据')  # 第{i}行" for i in range(code_bytes // 40)]
    return "先看代码：\n\n" + OPENER + "\n" + "\n".join(lines) + "\n```\n\n以上。"


def fence_lines(text: str) -> int:
    return sum(1 for line in text.split("\n") if is_fence(line))


def without_added_fences(cards: list[str]) -> str:
    """The cards' text minus the fence lines added where a card was closed inside a block: a "```" after
    the card's last newline, and the opener starting the next card."""
    kept: list[str] = []
    for i, text in enumerate(cards):
        if i > 0 and kept[-1].endswith("\n") and cards[i - 1].endswith("\n```"):
            assert text.startswith(OPENER + "\n"), text[:40]
            text = text.removeprefix(OPENER + "\n")
        kept.append(text.removesuffix("```") if i < len(cards) - 1 and text.endswith("\n```") else text)
    return "".join(kept)


async def test_a_code_block_streamed_across_three_cards_stays_fenced_in_each(tmp_path: Path) -> None:
    answer = code_answer(60 * 1024)
    gateway = ScriptedSubmitter(chunks=40, delay_s=0.01, reply_for=lambda m: answer)
    async with harness(tmp_path, gateway) as h:
        fake = h.fake
        event = message_event("code please", token=TOKEN, app_id=APP_ID)
        message_id = event["event"]["message"]["message_id"]
        await post_event(h, event)
        await fake.wait_until(lambda: fake.closed_cards() >= 3 and all(not c.streaming for c in fake.cards.values()))
    texts = [c.content for c in cards_for(fake, message_id)]
    assert len(texts) == 3 and plain_replies(fake, message_id) == [] and fake.sequence_errors == []
    assert all(fence_lines(t) % 2 == 0 for t in texts)  # every card closes every block it opens
    assert texts[0].endswith("\n```") and texts[1].startswith(OPENER + "\n") and texts[1].endswith("\n```")
    assert texts[2].startswith(OPENER + "\n") and texts[2].endswith("```\n\n以上。")
    assert without_added_fences(texts) == answer  # the model's text, every character once


def test_a_long_normal_reply_cut_inside_a_block_reopens_it_in_each_card() -> None:
    answer = code_answer(10 * 1024)
    planned = plan_reply(answer)
    chunks = [chunk for _, chunk in planned]
    assert {fmt for fmt, _ in planned} == {"card"} and len(chunks) >= 3
    assert all(fence_lines(c) % 2 == 0 for c in chunks)
    assert all(c.startswith(OPENER + "\n") for c in chunks[1:])
    rebuilt = [c.removesuffix("\n```") if i < len(chunks) - 1 else c for i, c in enumerate(chunks)]
    rebuilt = [c.removeprefix(OPENER + "\n") if i else c for i, c in enumerate(rebuilt)]
    assert "\n".join(rebuilt) == answer  # cuts at line ends: the parts and the removed newlines are the reply


def test_no_card_is_just_an_empty_code_block() -> None:
    answer = "```\n" + "a" * 8000 + "\n```"  # one line longer than a card: hard-wrapped inside the block
    chunks = [chunk for _, chunk in plan_reply(answer)]
    assert len(chunks) == 3 and all(fence_lines(c) == 2 for c in chunks)
    assert all("a" * 1000 in c for c in chunks)  # each holds code; none is "```\n```"
    assert "".join(c.removeprefix("```\n").removesuffix("\n```") for c in chunks) == "a" * 8000
