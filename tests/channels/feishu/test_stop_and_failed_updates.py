"""Feishu review findings: a card whose final updates fail is still closed; events after stop are not acked."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from tests.support.fakes.feishu import feishu_encrypt, feishu_headers, message_event
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.feishu import APP_ID, KEY, TOKEN, harness


async def test_a_failed_final_card_update_still_closes_the_card(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()  # no delay: the whole reply is there before the writer runs, so the
    async with harness(tmp_path, gateway) as h:  # fallback's final content update is the card's first
        fake = h.fake
        fake.fail_ops = {"card_update": 1, "card_content": 1}  # the full update and that fallback both fail
        event = message_event("hi", token=TOKEN, app_id=APP_ID)
        body = feishu_encrypt(event, KEY)
        async with (
            aiohttp.ClientSession() as s,
            s.post(h.events_url("main"), data=body, headers=feishu_headers(body, KEY)) as r,
        ):
            assert r.status == 200
        await fake.wait_until(lambda: any(m.msg_type != "interactive" for m in fake.replies()))
    [card] = fake.cards.values()
    assert card.streaming is False and card.settings[-1]["config"]["streaming_mode"] is False  # not "生成中"
    assert fake.sequence_errors == []
    [fallback] = [m for m in fake.replies() if m.msg_type != "interactive"]
    assert fallback.content == {"text": "echo: hi"}  # the answer still arrives, once


async def test_an_event_after_stop_is_refused_so_feishu_redelivers_it(tmp_path: Path) -> None:
    gateway = ScriptedSubmitter()
    async with harness(tmp_path, gateway) as h:
        await h.channel.stop()
        event = message_event("late", token=TOKEN, app_id=APP_ID)
        body = feishu_encrypt(event, KEY)
        async with (
            aiohttp.ClientSession() as s,
            s.post(h.events_url("main"), data=body, headers=feishu_headers(body, KEY)) as r,
        ):
            status = r.status
    assert status >= 500  # a 200 would tell Feishu it was delivered, and nothing would ever answer it
    assert gateway.received == []
