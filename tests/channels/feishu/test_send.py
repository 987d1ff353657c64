"""Feishu proactive sends and normal replies: targets, formats, splitting, fallbacks, token refresh."""

from __future__ import annotations

from pathlib import Path

import pytest

from agenthub.errors import ChannelSendError
from agenthub.messages import OutboundMessage
from tests.support.fakes.feishu import FakeFeishu, running_channel
from tests.support.fakes.submitter import ScriptedSubmitter

APP_ID, SECRET = "cli_send", "s3cret-send"
APP = {"app_id": APP_ID, "app_secret": SECRET, "mode": "webhook", "verification_token": "vt"}


async def test_proactive_messages_pick_target_format_and_split(tmp_path: Path) -> None:
    long_code = "```python\n" + "\n".join(f"value_{i} = {i}" for i in range(800)) + "\n```"
    async with (
        FakeFeishu({APP_ID: SECRET}) as fake,
        running_channel(fake, tmp_path, {"main": APP}, ScriptedSubmitter()) as h,
    ):
        await h.channel.send(OutboundMessage(channel="feishu", chat_id="oc_group:ou_member", content="提醒：开会"))
        await h.channel.send(OutboundMessage(channel="feishu", chat_id="ou_someone", content=long_code))
        await h.channel.send(OutboundMessage(channel="feishu", chat_id="x", content="**done**", reply_to="om_q1"))
    created = fake.replies("create")
    assert (created[0].target, created[0].msg_type, created[0].content) == ("chat_id:", "text", {"text": "提醒：开会"})
    cards = created[1:]
    assert (
        len(cards) >= 3 and {m.msg_type for m in cards} == {"interactive"} and {m.target for m in cards} == {"open_id:"}
    )
    shown = "\n".join(m.content["body"]["elements"][0]["content"] for m in cards)
    assert "value_0 = 0" in shown and "value_799 = 799" in shown
    [reply] = fake.replies()
    assert (reply.target, reply.msg_type) == ("om_q1", "post")
    receive_ids = [body.get("receive_id") for op, _, body in fake.calls if op == "create"]
    assert receive_ids[0] == "oc_group" and receive_ids[1] == "ou_someone"


async def test_a_refused_rich_reply_is_resent_as_text_and_a_rejected_token_is_refreshed(tmp_path: Path) -> None:
    async with (
        FakeFeishu({APP_ID: SECRET}) as fake,
        running_channel(fake, tmp_path, {"main": APP}, ScriptedSubmitter()) as h,
    ):
        fake.tokens.clear()  # the cached token is now unknown to Feishu (99991663)
        fake.fail_ops = {"reply": 1}
        await h.channel.send(OutboundMessage(channel="feishu", chat_id="x", content="# Title\ntext", reply_to="om_q"))
    assert fake.token_fetches[APP_ID] == 2
    [reply] = fake.replies()
    assert (reply.msg_type, reply.content) == ("text", {"text": "# Title\ntext"})


async def test_send_failures_raise_channel_send_error(tmp_path: Path) -> None:
    async with (
        FakeFeishu({APP_ID: SECRET}) as fake,
        running_channel(fake, tmp_path, {"main": APP}, ScriptedSubmitter()) as h,
    ):
        fake.fail_ops = {"create": 1}
        with pytest.raises(ChannelSendError, match="230001"):
            await h.channel.send(OutboundMessage(channel="feishu", chat_id="oc_g", content="hi"))
        with pytest.raises(ChannelSendError, match="no running feishu app"):
            await h.channel.send(OutboundMessage(channel="feishu", chat_id="oc_g", content="hi", cred_id="other"))


async def test_a_rate_limit_waits_as_long_as_the_reset_header_says_up_to_60_s() -> None:
    from pydantic import SecretStr

    from channels.feishu.api import FeishuApi

    slept: list[float] = []

    async def sleep(seconds: float) -> None:  # an injected sleep: the test takes no time
        slept.append(seconds)

    async with FakeFeishu({APP_ID: SECRET}) as fake:
        api = FeishuApi(fake.url, APP_ID, SecretStr(SECRET), sleep=sleep)
        try:
            fake.rate_limit, fake.rate_limit_reset = {"reply": 1}, "45"
            first = await api.reply("om_q1", "text", {"text": "one"}, "uuid-1")
            fake.rate_limit, fake.rate_limit_reset = {"reply": 1}, "300"
            second = await api.reply("om_q2", "text", {"text": "two"}, "uuid-2")
        finally:
            await api.close()
    assert slept == [45.0, 60.0]  # the window Feishu names, bounded so a bad header cannot stall a turn
    assert first and second and [m.content for m in fake.replies()] == [{"text": "one"}, {"text": "two"}]
