"""The per-member send budget of a WeCom app: WeCom drops messages over 30/min and 1000/h per member silently."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from agenthub import i18n
from agenthub.errors import ConfigError
from agenthub.messages import OutboundMessage
from channels.wecom import WeComChannel
from channels.wecom.api import WorkApi
from channels.wecom.app import MemberBudgetExhausted
from channels.wecom.budget import MemberBudget
from channels.wecom.text import head_with_note, pack_utf8, split_utf8, utf8_len
from tests.support.fakes.submitter import ScriptedSubmitter
from tests.support.fakes.wecom import FakeQyApi, channel_context, message_xml
from tests.support.fakes.wecom_limits import FakeClock
from tests.support.wecom import AGENT_ID, CORP_ID, SECRET, Harness, app_table, text


def ten_part_answer(tag: str) -> str:
    """About 11.5 KB in ten paragraphs: `split_utf8` makes ten 1150-byte parts; packed it fits in six."""
    sentence = "企业微信每分钟最多给一个成员发三十条消息。" * 18
    return "".join(f"{tag}第{j}段：{sentence}\n\n" for j in range(10))


def texts_to(api: FakeQyApi, user: str) -> list[str]:
    return [m["text"]["content"] for m in api.sends if m["touser"] == user]


def three_part_answer() -> str:
    """About 4.6 KB in four paragraphs: `split_utf8` makes four parts; packed it fits in three."""
    sentence = "长回答要分成几条消息发送，每条最多两千零四十八字节。" * 15
    return "".join(f"第{j}段：{sentence}\n\n" for j in range(4))


def split_note(message: str) -> tuple[str, str]:
    """(answer text, note) of a message that ends with a held-back note."""
    at = message.rindex("（")
    return message[:at].removesuffix("\n\n"), message[at:]


def test_the_ten_part_answer_has_ten_parts_and_packs_into_fewer() -> None:
    reply = ten_part_answer("答")
    assert len(split_utf8(reply, 2048)) == 10
    assert len(pack_utf8(reply, 2048)) == 6


async def test_the_fake_drops_the_31st_message_of_a_minute_with_errcode_0(api: FakeQyApi) -> None:
    clock = FakeClock()
    api.clock = clock.now
    async with aiohttp.ClientSession() as session:
        work = WorkApi(session, base_url=api.url, corp_id=CORP_ID, secret=SECRET, cred_id="hr")
        for i in range(31):
            answer = await work.send_message(
                {"touser": "zhangsan", "agentid": AGENT_ID, "msgtype": "text", "text": {"content": str(i)}}
            )
            assert answer["errcode"] == 0
        await clock.advance(60)
        await work.send_message(
            {"touser": "zhangsan", "agentid": AGENT_ID, "msgtype": "text", "text": {"content": "ok"}}
        )
    assert [m["text"]["content"] for m in api.dropped] == ["30"]
    assert len(api.sends) == 31


async def test_four_long_answers_in_one_minute_lose_nothing_and_do_not_slow_another_member(
    harness: Harness, api: FakeQyApi
) -> None:
    clock = FakeClock()
    harness.use_clock(clock)
    answers = {f"q{k}": ten_part_answer(f"答{k}") for k in range(1, 5)} | {"lisi": ten_part_answer("李四")}
    harness.submitter.reply_for = lambda m: answers[m.content]
    await harness.start()
    with capture_logs() as logs:
        for k in range(1, 5):
            await harness.post(text(f"q{k}", msg_id=100 + k))
        await clock.wait_sleeping(1)  # three answers used the minute's 30 messages; the fourth waits
        assert len(texts_to(api, "zhangsan")) == 30
        await harness.post(text("lisi", msg_id=200, user="lisi"))
        await api.wait_for(lambda: len(texts_to(api, "lisi")) == 10)
        assert clock.slept == [60.0]  # lisi never waited, and no fake time has passed
        await clock.advance(60)
        await harness.settle()
    assert api.dropped == []
    got = texts_to(api, "zhangsan")
    assert all(utf8_len(t) <= 2048 for t in got)
    order = sorted(answers.keys() - {"lisi"}, key=lambda q: "".join(got).index(answers[q][:4]))
    assert "".join(got) == "".join(answers[q] for q in order)  # everything, in order, never interleaved
    assert len(got) == 36  # 3 x 10 parts, then the fourth answer packed into 6
    assert "".join(texts_to(api, "lisi")) == answers["lisi"]
    waits = [e for e in logs if e["event"] == "wecom_member_budget_wait"]
    assert [(e["user"], e["wait_s"], e["parts"]) for e in waits] == [("zhangsan", 60.0, 6)]


@pytest.mark.parametrize(
    ("window", "later"),
    [({"member_per_minute": 12, "member_wait_max_s": 5}, 60), ({"member_per_hour": 12}, 3600)],
    ids=["minute", "hour"],
)
async def test_an_answer_over_the_budget_sends_what_fits_and_says_so(
    harness: Harness, api: FakeQyApi, window: dict[str, float], later: float
) -> None:
    clock = FakeClock()
    harness.use_clock(clock)
    api.member_per_minute = int(window.get("member_per_minute", 30))
    api.member_per_hour = int(window.get("member_per_hour", 1000))
    harness.submitter.reply_for = lambda m: ten_part_answer(m.content) if m.content.startswith("长") else "好的"
    await harness.start(**window)
    with capture_logs() as logs:
        await harness.post(text("长一", msg_id=1))
        await harness.settle()
        await harness.post(text("长二", msg_id=2))
        await harness.settle()
        await harness.post(text("短", msg_id=3))  # nothing may go within member_wait_max_s
        await harness.settle()
    got = api.texts()
    assert len(got) == 12
    packed = pack_utf8(ten_part_answer("长二"), 2048)
    assert "".join(got[:11]) == ten_part_answer("长一") + packed[0]
    head, note = split_note(got[11])
    assert packed[1].startswith(head) and utf8_len(head) > 1500  # the last message still carries the answer
    assert f"余下约 {utf8_len(''.join(packed[1:])) - utf8_len(head)} 字节暂未发送" in note
    assert "请稍后让我继续" in note and utf8_len(got[11]) <= 2048
    assert clock.slept == []  # waiting would exceed member_wait_max_s: nothing was waited for
    exhausted = [e for e in logs if e["event"] == "wecom_member_budget_exhausted"]
    assert [(e["sent_parts"], e["parts"]) for e in exhausted] == [(2, 6), (0, 1)]
    failed = next(e for e in logs if e["event"] == "wecom_reply_failed")
    assert "budget" in failed["error"]
    await clock.advance(later)
    await harness.post(text("短", msg_id=4))
    await harness.settle()
    assert api.texts()[-1] == "好的"
    assert api.dropped == []


async def test_welcomes_unsupported_replies_and_proactive_sends_share_the_budget(
    harness: Harness, api: FakeQyApi
) -> None:
    clock = FakeClock()
    harness.use_clock(clock)
    api.member_per_minute = 3
    channel = await harness.start(member_per_minute=3, member_wait_max_s=0, welcome="欢迎")
    enter: dict[str, str | int] = {"MsgType": "event", "Event": "enter_agent", "EventKey": ""}
    video: dict[str, str | int] = {"MsgType": "video", "MediaId": "m", "ThumbMediaId": "t", "MsgId": 6}
    await harness.post(message_xml(CORP_ID, "zhangsan", AGENT_ID, enter))
    await harness.post(message_xml(CORP_ID, "zhangsan", AGENT_ID, video))
    await harness.settle()
    note = OutboundMessage(channel="wecom", chat_id="zhangsan", content="提醒：三点开会", cred_id="hr")
    await channel.send(note)
    with pytest.raises(MemberBudgetExhausted) as info:
        await channel.send(note)
    assert info.value.free_in_s == 60
    await harness.post(text("还有吗", msg_id=7))
    await harness.settle()
    assert api.texts() == ["欢迎", i18n.text("media.unsupported", "zh-CN", kind="video"), "提醒：三点开会"]
    await channel.send(OutboundMessage(channel="wecom", chat_id="lisi", content="另一位成员不受影响", cred_id="hr"))
    assert api.dropped == []
    assert api.texts()[-1] == "另一位成员不受影响"


async def test_proactive_send_waits_for_the_window_within_the_bound(harness: Harness, api: FakeQyApi) -> None:
    clock = FakeClock()
    harness.use_clock(clock)
    channel = await harness.start(member_per_minute=1, member_wait_max_s=60)
    api.member_per_minute = 1
    await channel.send(OutboundMessage(channel="wecom", chat_id="zhangsan", content="一", cred_id="hr"))
    await clock.advance(20)
    second = asyncio.create_task(
        channel.send(OutboundMessage(channel="wecom", chat_id="zhangsan", content="二", cred_id="hr"))
    )
    await clock.wait_sleeping(1)
    assert clock.slept == [40.0]
    assert api.texts() == ["一"]
    await clock.advance(40)
    await second
    assert api.texts() == ["一", "二"]
    assert api.dropped == []


async def free(budget: MemberBudget, member: str) -> int:
    """How many messages may go to `member` right now."""
    return sum(1 for wait in await budget.waits(member, 10) if wait <= 0)


async def test_sliding_windows_give_the_earliest_slots() -> None:
    clock = FakeClock(start=0.0)
    budget = MemberBudget([(60, 3), (3600, 5)], clock=clock.now, sleep=clock.sleep)
    assert await budget.waits("a", 6) == [0, 0, 0, 60, 60, 3600]
    assert await free(budget, "a") == 3
    assert await free(budget, "b") == 3


async def test_acquire_counts_sends_per_member() -> None:
    clock = FakeClock(start=0.0)
    budget = MemberBudget([(60, 2)], clock=clock.now, sleep=clock.sleep)
    for at in (0.0, 10.0):
        await clock.advance(at - clock.t)
        assert await budget.acquire("a") == 0
    assert await free(budget, "a") == 0 and await free(budget, "b") == 2
    assert await budget.waits("a", 2) == [50.0, 60.0]  # from t = 10: at 60 and 70
    await clock.advance(50.5)  # t = 60.5: the send at 0 left the window (60 s, exclusive)
    assert await free(budget, "a") == 1


async def test_no_wait_allowed_still_sends_what_the_window_has_room_for_on_a_real_clock(
    harness: Harness, api: FakeQyApi
) -> None:
    channel = await harness.start(member_wait_max_s=0)  # time.monotonic moves between two readings
    await channel.send(OutboundMessage(channel="wecom", chat_id="zhangsan", content="提醒", cred_id="hr"))
    assert api.texts() == ["提醒"]


@given(st.text(alphabet=st.sampled_from(list("企业微信a。\n😀 .")), max_size=3000), st.integers(4, 700))
def test_pack_utf8_loses_nothing_and_never_needs_more_parts_than_split(value: str, limit: int) -> None:
    packed = pack_utf8(value, limit)
    assert "".join(packed) == value
    assert all(0 < utf8_len(p) <= limit for p in packed)
    assert len(packed) <= len(split_utf8(value, limit))


@given(st.text(alphabet=st.sampled_from(list("企业微信a。\n😀 .")), min_size=1, max_size=3000), st.integers(40, 700))
def test_head_with_note_keeps_the_start_of_the_text_and_counts_the_rest(value: str, limit: int) -> None:
    message, held = head_with_note(value, lambda n: f"（余下 {n} 字节）", limit)
    assert utf8_len(message) <= limit
    if utf8_len(value) <= limit:
        assert (message, held) == (value, 0)
        return
    head = value.encode()[: utf8_len(value) - held].decode()  # the text that went out; `held` bytes did not
    assert head
    gap = "\n" * max(0, 2 - (len(head) - len(head.rstrip("\n"))))
    assert message == f"{head}{gap}（余下 {held} 字节）"


def test_budget_settings_are_validated(api: FakeQyApi, tmp_path: Path) -> None:
    context = channel_context(ScriptedSubmitter(), tmp_path)
    with pytest.raises(ConfigError, match=r"apps\.hr\.member_per_minute"):
        WeComChannel(context, app_table(api, member_per_minute=0))
    with pytest.raises(ConfigError, match=r"apps\.hr\.member_wait_max_s"):
        WeComChannel(context, app_table(api, member_wait_max_s=-1))
    config = WeComChannel(context, app_table(api)).config.apps["hr"]
    assert (config.member_per_minute, config.member_per_hour, config.member_wait_max_s) == (30, 1000, 60.0)


async def test_one_message_left_carries_the_start_of_the_answer_and_the_note(harness: Harness, api: FakeQyApi) -> None:
    clock = FakeClock()
    harness.use_clock(clock)
    api.member_per_minute = 2
    reply = three_part_answer()
    assert len(pack_utf8(reply, 2048)) == 3
    harness.submitter.reply_for = lambda m: reply
    channel = await harness.start(member_per_minute=2, member_wait_max_s=0)
    await channel.send(OutboundMessage(channel="wecom", chat_id="zhangsan", content="提醒", cred_id="hr"))
    await harness.post(text("长文", msg_id=1))  # one message left in this minute
    await harness.settle()
    assert api.texts()[0] == "提醒" and len(api.texts()) == 2
    message = api.texts()[1]
    head, note = split_note(message)
    assert reply.startswith(head) and utf8_len(head) > 1500
    assert message.endswith("请稍后让我继续。）") and utf8_len(message) <= 2048
    assert f"余下约 {utf8_len(reply) - utf8_len(head)} 字节暂未发送" in note
    assert api.dropped == []


async def test_the_pause_between_parts_runs_on_the_injected_clock(harness: Harness, api: FakeQyApi) -> None:
    clock = FakeClock()
    harness.use_clock(clock)
    reply = three_part_answer()
    assert len(split_utf8(reply, 2048)) == 4
    harness.submitter.reply_for = lambda m: reply
    await harness.start(part_gap_s=5)
    await harness.post(text("长文", msg_id=1))
    for sent in range(1, 4):
        await api.wait_for(lambda: len(api.sends) > len(clock.slept))  # the send before each pause
        await clock.wait_sleeping(1, timeout=2)
        assert len(api.sends) == sent and clock.slept == [5.0] * sent
        await clock.advance(5)
    await harness.settle()
    assert "".join(api.texts()) == reply
    assert clock.slept == [5.0] * 3
