"""Messages the Feishu channel drops on purpose: stale ones (after downtime) and ones sent by bots."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tests.support.fakes.feishu import Harness, message_event
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.feishu import APP, APP_ID, BOT, TOKEN, harness, post_event


async def answer_after(h: Harness, gateway: ScriptedSubmitter, text: str) -> None:
    """Send a normal message and wait for its card: whatever came before has been handled by then."""
    await post_event(h, message_event(text, token=TOKEN, app_id=APP_ID))
    await gateway.wait_for(1)
    await h.fake.wait_until(lambda: h.fake.closed_cards() == 1)


async def test_a_message_older_than_stale_after_s_is_dropped_unanswered(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway, apps={"main": {**APP, "stale_after_s": 60}}) as h:
        old = message_event("from before the outage", token=TOKEN, app_id=APP_ID, create_time_ms=0)
        old["event"]["message"]["create_time"] = str(int((time.time() - 120) * 1000))
        with capture_logs() as logs:
            status, _ = await post_event(h, old)
            await answer_after(h, gateway, "fresh")
    assert status == 200  # acknowledged, so Feishu does not redeliver it either
    assert [m.content for m in gateway.received] == ["fresh"]
    assert len(h.fake.messages) == 1  # only the fresh message's card
    [dropped] = [e for e in logs if e["event"] == "feishu_stale_dropped"]
    assert dropped["message_id"] == old["event"]["message"]["message_id"] and dropped["age_s"] >= 119


@pytest.mark.parametrize("sender", ["another_bot", "itself"])
async def test_messages_from_bots_are_never_answered(tmp_path: Path, sender: str) -> None:
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway) as h:
        if sender == "another_bot":
            event = message_event("bot chatter", token=TOKEN, app_id=APP_ID, sender="ou_other_bot", sender_type="app")
        else:
            event = message_event("my own reply", token=TOKEN, app_id=APP_ID, sender=BOT)
        status, _ = await post_event(h, event)
        await answer_after(h, gateway, "from a person")
    assert status == 200
    assert [m.content for m in gateway.received] == ["from a person"]
    assert len(h.fake.messages) == 1 and h.fake.reactions == []


async def test_a_message_is_answered_when_the_dedup_file_cannot_be_written(tmp_path: Path) -> None:
    """Feishu has its ack before the dedup check, so an unwritable memory must not lose the message (as WeCom)."""
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway) as h:
        (tmp_path / "feishu_dedup.jsonl").unlink(missing_ok=True)
        (tmp_path / "feishu_dedup.jsonl").mkdir()  # every append now fails with IsADirectoryError
        with capture_logs() as logs:
            await answer_after(h, gateway, "still answered")
    assert [m.content for m in gateway.received] == ["still answered"]
    assert any(e["event"] == "feishu_dedup_unavailable" for e in logs)
