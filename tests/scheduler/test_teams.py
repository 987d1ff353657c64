"""Scheduled jobs in Chinese team chats: `/jobs` and the scheduler's own notices in the chat's locale, and prompt
jobs that run on behalf of the person who made them (their profile of that chat's visibility)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio

from agenthub.clock import ManualClock
from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import Services, build_services
from agenthub.memory.files import Visibility
from agenthub.messages import InboundMessage
from agenthub.scheduler.wiring import start_scheduler, stop_scheduler
from agenthub.session_keys import SessionKey
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, reply_text, reply_tool
from tests.support.memory import system_text
from tests.support.scheduler import START, RecordingChannel, shanghai, until

PRIVATE_CHAT, GROUP_CHAT = "alice-dm", "team"


def wecom(chat: str, sender: str, text: str) -> InboundMessage:
    chat_type = "group" if chat == GROUP_CHAT else "private"
    return InboundMessage("wecom", chat, sender, text, metadata={"chat_type": chat_type})


async def ask(gw: GatewayCore, message: InboundMessage) -> str:
    return await (await gw.submit(message)).text()


async def create(gw: GatewayCore, fake: FakeAnthropic, args: dict[str, Any], chat: str = PRIVATE_CHAT) -> str:
    """Alice asks in `chat`; the model calls manage_cron_jobs with `args`; returns the new job's id."""
    fake.script(reply_tool("manage_cron_jobs", args), reply_text("好的"))
    await ask(gw, wecom(chat, "alice", "请安排一下"))
    body = fake.message_requests()[-1].body
    assert body is not None
    [result] = [b for b in body["messages"][-1]["content"] if b.get("type") == "tool_result"]
    assert not result.get("is_error"), result
    return str(result["content"]).split()[2].rstrip(";")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest_asyncio.fixture
async def started(settings_factory: Callable[..., Settings], clock: ManualClock) -> AsyncIterator[Callable[..., Any]]:
    """Builds a gateway from settings overrides with a running scheduler pushing into a recorded WeCom channel."""
    opened: list[Services] = []

    async def start(**overrides: Any) -> tuple[GatewayCore, RecordingChannel]:
        channel = RecordingChannel("wecom")
        services = await build_services(settings_factory(**overrides), clock=clock).__aenter__()
        opened.append(services)
        await start_scheduler(services, [channel])
        return services.gateway, channel

    yield start
    for services in reversed(opened):
        await stop_scheduler(services)
        await services.__aexit__(None, None, None)


# ---- locale ------------------------------------------------------------------------------------


async def test_jobs_on_a_wecom_chat_answers_in_chinese_with_chinese_times(
    started: Callable[..., Any], fake_llm: FakeAnthropic
) -> None:
    gw, _ = await started()
    assert "还没有定时任务" in await ask(gw, wecom(PRIVATE_CHAT, "alice", "/jobs"))
    once = await create(gw, fake_llm, {"action": "create", "at": "2026-12-02T09:00:00", "text": "交周报"})
    daily = await create(gw, fake_llm, {"action": "create", "cron": "30 18 * * *", "prompt": "总结今天的讨论"})
    berlin = await create(
        gw, fake_llm, {"action": "create", "at": "2027-01-05T08:00:00", "timezone": "Europe/Berlin", "text": "x"}
    )
    listing = await ask(gw, wecom(PRIVATE_CHAT, "alice", "/jobs"))
    lines = listing.splitlines()
    assert lines[0] == "本会话的定时任务（3 个）："
    assert f"{daily}  周期（cron 30 18 * * *），下次 12月1日 18:30" in lines  # soonest first
    assert f"{once}  一次性，12月2日 09:00" in lines and "    提醒：交周报" in lines
    assert "    指令：总结今天的讨论" in lines
    assert f"{berlin}  一次性，2027年1月5日 08:00（Europe/Berlin）" in lines  # another year, another zone
    assert lines[1].startswith(daily) and lines[-1] == "删除任务：/jobs delete ID"

    assert await ask(gw, wecom(PRIVATE_CHAT, "alice", "/jobs delete nope")) == (
        "本会话没有编号为 nope 的定时任务（发送 /jobs 查看）。"
    )
    assert await ask(gw, wecom(PRIVATE_CHAT, "alice", f"/jobs delete {once}")) == f"已删除定时任务 {once}。"
    assert (await ask(gw, wecom(PRIVATE_CHAT, "alice", "/jobs what"))).startswith("用法：")


@pytest.mark.parametrize("where", ["channel", "agent"])
async def test_jobs_answers_in_english_when_the_channel_or_the_agent_says_so(
    started: Callable[..., Any], fake_llm: FakeAnthropic, settings_factory: Callable[..., Settings], where: str
) -> None:
    if where == "agent":
        write_agent(settings_factory().agents_dir, "default", {"locale": "en"})
        gw, _ = await started()
    else:
        gw, _ = await started(channels={"wecom": {"locale": "en"}})
    assert (await ask(gw, wecom(PRIVATE_CHAT, "alice", "/jobs"))).startswith("This chat has no scheduled jobs.")
    job = await create(gw, fake_llm, {"action": "create", "at": "2026-12-02T09:00:00", "text": "交周报"})
    listing = (await ask(gw, wecom(PRIVATE_CHAT, "alice", "/jobs"))).splitlines()
    assert listing[:3] == ["Scheduled jobs of this chat (1):", f"{job}  once, Dec 2 09:00", "    text: 交周报"]
    assert await ask(gw, wecom(PRIVATE_CHAT, "alice", f"/jobs delete {job}")) == f"Deleted job {job}."
    assert (await ask(gw, wecom(PRIVATE_CHAT, "alice", "/jobs what"))).startswith("Usage: /jobs")


async def test_a_failed_prompt_job_tells_the_chat_in_its_locale_without_the_error(
    started: Callable[..., Any], clock: ManualClock, fake_llm: FakeAnthropic
) -> None:
    gw, channel = await started()
    job = await create(gw, fake_llm, {"action": "create", "cron": "0 9 * * *", "prompt": "汇报进度"})
    fake_llm.script(ScriptedReply(status=400, error_message="SECRET-UPSTREAM-DETAIL"))
    clock.advance(shanghai(2026, 12, 1, 9, 0) - clock())
    [sent] = await channel.wait_for(1)
    assert sent.chat_id == PRIVATE_CHAT
    assert sent.content == f"定时任务 {job} 这次没能完成，下次将在 12月2日 09:00 照常运行。"
    history = await gw.history.load(SessionKey("default", "wecom", PRIVATE_CHAT))
    assert history[-1]["role"] == "assistant"  # stored like any push, so HTTP feeds and the console show it
    assert (history[-1]["content"], history[-1]["scheduled_job"]) == (sent.content, job)
    assert "SECRET-UPSTREAM-DETAIL" not in str(history)


async def test_a_prompt_job_over_its_creators_budget_is_refused_before_any_model_call(
    started: Callable[..., Any], clock: ManualClock, fake_llm: FakeAnthropic
) -> None:
    gw, channel = await started(budgets={"user_day": 1})
    job = await create(gw, fake_llm, {"action": "create", "cron": "0 9 * * *", "prompt": "汇报进度"})
    assert gw.turn_services.usage is not None
    await gw.turn_services.usage.gate.drain()
    calls = len(fake_llm.message_requests())
    clock.advance(shanghai(2026, 12, 1, 9, 0) - clock())
    [sent] = await channel.wait_for(1)
    assert "你的每日用量额度（1 tokens）已用完" in sent.content
    assert len(fake_llm.message_requests()) == calls
    history = await gw.history.load(SessionKey("default", "wecom", PRIVATE_CHAT))
    assert (history[-1]["content"], history[-1]["scheduled_job"]) == (sent.content, job)


# ---- on behalf of the person who made the job ------------------------------------------------


async def _plant_profiles(gw: GatewayCore) -> None:
    agent = gw.agents.get("default")
    chats: tuple[tuple[Visibility, str], ...] = (("private", PRIVATE_CHAT), ("group", GROUP_CHAT))
    for visibility, chat in chats:
        name = gw.memory_files.person_profile(agent, SessionKey("default", "wecom", chat), "alice", visibility)
        await gw.memory_files.store.write(name, f"ALICE-{visibility.upper()}-PROFILE\n")


@pytest.mark.parametrize(
    ("chat", "seen", "unseen"), [(PRIVATE_CHAT, "PRIVATE", "GROUP"), (GROUP_CHAT, "GROUP", "PRIVATE")]
)
async def test_a_prompt_job_runs_on_behalf_of_its_creator_with_the_chats_profile(
    started: Callable[..., Any], clock: ManualClock, fake_llm: FakeAnthropic, chat: str, seen: str, unseen: str
) -> None:
    gw, channel = await started()
    await _plant_profiles(gw)
    job = await create(gw, fake_llm, {"action": "create", "at": "2026-12-01T09:00:00", "prompt": "提醒我的习惯"}, chat)
    fake_llm.script(reply_text("记得喝水"))
    before = len(fake_llm.message_requests())
    clock.advance(shanghai(2026, 12, 1, 9, 0) - clock())
    [sent] = await channel.wait_for(1)
    assert (sent.chat_id, sent.content) == (chat, "记得喝水")
    [request] = fake_llm.message_requests()[before:]
    assert request.body is not None
    system = system_text(request.body)
    assert f"ALICE-{seen}-PROFILE" in system and f"ALICE-{unseen}-PROFILE" not in system
    history = await gw.history.load(SessionKey("default", "wecom", chat))
    prompt_record = history[-2]
    assert prompt_record["role"] == "user" and prompt_record["sender_id"] == "alice"
    assert prompt_record["scheduled_job"] == job  # the history still says it was the schedule, not Alice, speaking
    assert prompt_record["chat_type"] == ("group" if chat == GROUP_CHAT else "private")


async def test_a_prompt_job_its_creator_stops_ends_quietly(
    started: Callable[..., Any], clock: ManualClock, fake_llm: FakeAnthropic
) -> None:
    gw, channel = await started()
    await create(gw, fake_llm, {"action": "create", "at": "2026-12-01T09:00:00", "prompt": "汇报进度"})
    await create(gw, fake_llm, {"action": "create", "at": "2026-12-01T09:01:00", "text": "sentinel"})
    release = asyncio.Event()
    fake_llm.script(reply_text("user answer", hold=release))
    user_turn = await gw.submit(wecom(PRIVATE_CHAT, "alice", "a long question"))
    clock.advance(shanghai(2026, 12, 1, 9, 0) - clock())
    await until(lambda: gw.queue_depth() == 2)  # the job's turn waits behind Alice's running one
    stopped = await ask(gw, wecom(PRIVATE_CHAT, "alice", "/stop"))
    assert "1" in stopped  # her queued job turn was dropped with her own messages
    release.set()
    await user_turn.result()
    clock.advance(shanghai(2026, 12, 1, 9, 1) - clock())
    await channel.wait_for(1)
    await until(lambda: gw.queue_depth() == 0)
    assert channel.texts() == ["sentinel"]  # no "could not be completed" notice for a run she stopped
