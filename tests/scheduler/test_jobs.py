"""Scheduled jobs end to end through the gateway: created by the model's tool call, fired by a manual clock."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import AsyncIterator, Callable
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import pytest_asyncio
from structlog.testing import capture_logs

from agenthub.clock import ManualClock
from agenthub.config import Settings
from agenthub.errors import ConfigError
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import Services, build_services
from agenthub.messages import ErrorEvent, InboundMessage, OutboundMessage
from agenthub.scheduler.core import Scheduler
from agenthub.scheduler.jobs import Job
from agenthub.scheduler.wiring import start_scheduler, stop_scheduler
from agenthub.session_keys import SessionKey
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, reply_text, reply_tool
from tests.support.scheduler import START, RecordingChannel, shanghai, until

KEY = SessionKey("default", "cli", "direct")


def _msg(text: str) -> InboundMessage:
    return InboundMessage("cli", "direct", "me", text)


def _scheduler(services: Services) -> Scheduler:
    assert services.scheduler is not None
    return services.scheduler


def _tool_results(fake: FakeAnthropic) -> list[dict[str, Any]]:
    results = []
    for request in fake.message_requests():
        assert request.body is not None
        for message in request.body["messages"]:
            if isinstance(message["content"], list):
                results += [b for b in message["content"] if b.get("type") == "tool_result"]
    return results


async def _create(gw: GatewayCore, fake: FakeAnthropic, args: dict[str, Any], say: str = "好的") -> str:
    """One user turn in which the model calls manage_cron_jobs with `args`; returns the tool's result text."""
    fake.script(reply_tool("manage_cron_jobs", args), reply_text(say))
    await (await gw.submit(_msg("please schedule it"))).text()
    result = _tool_results(fake)[-1]
    assert not result.get("is_error"), result
    return str(result["content"])


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest_asyncio.fixture
async def running(settings: Settings, clock: ManualClock) -> AsyncIterator[tuple[Services, RecordingChannel]]:
    channel = RecordingChannel()
    async with build_services(settings, clock=clock) as services:
        await start_scheduler(services, [channel])
        yield services, channel
        await stop_scheduler(services)


async def test_a_reminder_made_by_a_tool_call_fires_at_its_time(
    running: tuple[Services, RecordingChannel], clock: ManualClock, fake_llm: FakeAnthropic
) -> None:
    services, channel = running
    gw = services.gateway
    text = await _create(gw, fake_llm, {"action": "create", "at": "2026-12-02T09:00:00", "text": "交周报"})
    assert text.startswith("created job ") and "2026-12-02T09:00+08:00" in text
    due = shanghai(2026, 12, 2, 9, 0)
    assert _scheduler(services).next_due() == due
    clock.advance(due - 1 - clock())
    for _ in range(20):
        await asyncio.sleep(0)
    assert channel.sent == []
    clock.advance(1)
    [sent] = await channel.wait_for(1)
    assert (sent.channel, sent.chat_id, sent.content, sent.agent) == ("cli", "direct", "交周报", "default")
    history = await gw.history.load(KEY)
    assert history[-1]["role"] == "assistant" and history[-1]["content"] == "交周报"
    assert history[-1]["scheduled_job"] == text.split()[2].rstrip(";")
    assert _scheduler(services).for_chat(KEY) == []  # a one-off is gone once it ran


async def test_recurring_job_fires_on_schedule_and_deletion_stops_it(
    running: tuple[Services, RecordingChannel], clock: ManualClock, fake_llm: FakeAnthropic
) -> None:
    services, channel = running
    gw = services.gateway
    made = await _create(gw, fake_llm, {"action": "create", "cron": "0 9 * * *", "text": "站会"})
    job_id = made.split()[2].rstrip(";")
    for day in (1, 2, 3):
        clock.advance(shanghai(2026, 12, day, 9, 0) - clock())
        await channel.wait_for(day)
    assert channel.texts() == ["站会"] * 3
    [job] = _scheduler(services).for_chat(KEY)
    assert job.runs == 3 and job.next_due == shanghai(2026, 12, 4, 9, 0)

    listing = await (await gw.submit(_msg("/jobs"))).text()
    assert job_id in listing and "0 9 * * *" in listing
    assert await (await gw.submit(_msg(f"/jobs delete {job_id}"))).text() == f"Deleted job {job_id}."
    await _create(gw, fake_llm, {"action": "create", "at": "2026-12-04T09:01:00", "text": "sentinel"})
    clock.advance(shanghai(2026, 12, 4, 9, 5) - clock())
    await channel.wait_for(4)
    assert channel.texts() == ["站会"] * 3 + ["sentinel"]  # the deleted job's 09:00 passed before the sentinel


async def test_restart_catch_up_runs_a_missed_job_once_and_skips_a_stale_one(
    settings: Settings, clock: ManualClock, fake_llm: FakeAnthropic
) -> None:
    async with build_services(settings, clock=clock) as services:  # jobs made while the daemon runs, then it stops
        gw = services.gateway
        await _create(gw, fake_llm, {"action": "create", "at": "2026-12-01T09:00:00", "text": "missed a bit"})
        await _create(gw, fake_llm, {"action": "create", "at": "2026-12-01T08:40:00", "text": "missed a lot"})
        await _create(gw, fake_llm, {"action": "create", "cron": "30 8 * * *", "text": "daily"})
    clock.advance(shanghai(2026, 12, 1, 9, 5) - clock())  # down until 09:05: 5, 25 and 35 minutes late
    for attempt in range(2):
        channel = RecordingChannel()
        async with build_services(settings, clock=clock) as services:
            gw = services.gateway
            await start_scheduler(services, [channel])
            scheduler = _scheduler(services)
            if attempt == 0:
                await channel.wait_for(1)  # the skipped ones were recorded before anything was sent
            assert (scheduler.next_due() or 0) > clock()
            await stop_scheduler(services)
        stored = json.loads((settings.data_dir / "default" / "jobs.json").read_text(encoding="utf-8"))
        if attempt == 0:
            assert channel.texts() == ["missed a bit"]
            assert (scheduler.fired, scheduler.skipped) == (1, 2)
        else:
            assert channel.texts() == [] and (scheduler.fired, scheduler.skipped) == (0, 0)
        assert [j["text"] for j in stored["jobs"]] == ["daily"]
        assert stored["jobs"][0]["next_due"] == shanghai(2026, 12, 2, 8, 30)


async def test_restart_catch_up_runs_the_latest_missed_run_of_a_recurring_job_once_and_skips_the_older_ones(
    settings: Settings, clock: ManualClock, fake_llm: FakeAnthropic
) -> None:
    async with build_services(settings, clock=clock) as services:
        gw = services.gateway
        await _create(gw, fake_llm, {"action": "create", "cron": "0 9 * * *", "text": "daily nine"})
        await _create(gw, fake_llm, {"action": "create", "cron": "*/2 * * * *", "text": "every two"})
    clock.advance(shanghai(2026, 12, 3, 9, 5) - clock())  # down two days; today's 09:00 only 5 minutes late
    channel = RecordingChannel()
    with capture_logs() as logs:
        async with build_services(settings, clock=clock) as services:
            gw = services.gateway
            await start_scheduler(services, [channel])
            scheduler = _scheduler(services)
            await channel.wait_for(2)
            await stop_scheduler(services)
    assert sorted(channel.texts()) == ["daily nine", "every two"]  # each once, however many runs were missed
    assert (scheduler.fired, scheduler.skipped) == (2, 2)
    fired = sorted(e["due"] for e in logs if e["event"] == "job_fired")
    assert fired == [shanghai(2026, 12, 3, 9, 0), shanghai(2026, 12, 3, 9, 4)]  # the latest at or before now
    stored = json.loads((settings.data_dir / "default" / "jobs.json").read_text(encoding="utf-8"))
    assert {e["job_id"] for e in logs if e["event"] == "job_missed"} == {j["id"] for j in stored["jobs"]}
    assert sorted(j["next_due"] for j in stored["jobs"]) == [shanghai(2026, 12, 3, 9, 6), shanghai(2026, 12, 4, 9)]


async def test_a_run_is_recorded_before_it_is_sent_so_a_crash_skips_rather_than_repeats(
    settings: Settings, clock: ManualClock, fake_llm: FakeAnthropic
) -> None:
    async with build_services(settings, clock=clock) as services:
        gw = services.gateway
        await _create(gw, fake_llm, {"action": "create", "at": "2026-12-01T09:00:00", "text": "once only"})
        scheduler = _scheduler(services)
        entered = asyncio.Event()

        async def crash_while_sending(job: Job, due: float) -> None:
            entered.set()
            await asyncio.Event().wait()  # the process dies here, before the platform heard anything

        await scheduler.start(crash_while_sending)
        clock.advance(shanghai(2026, 12, 1, 9, 0) - clock())
        await asyncio.wait_for(entered.wait(), 10)
        stored = json.loads((settings.data_dir / "default" / "jobs.json").read_text(encoding="utf-8"))
        assert stored["jobs"] == []
        await scheduler.stop()
    channel = RecordingChannel()
    async with build_services(settings, clock=clock) as services:
        gw = services.gateway
        await start_scheduler(services, [channel])
        assert _scheduler(services).next_due() is None and len(_scheduler(services)) == 0
        await stop_scheduler(services)


async def test_bad_input_gets_a_clear_error_back_to_the_model(
    settings_factory: Callable[..., Settings], clock: ManualClock, fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory(scheduler={"max_jobs_per_chat": 1, "min_interval_s": 120})
    calls = [
        {"action": "create", "cron": "0 9 * *", "text": "x"},
        {"action": "create", "cron": "* * * * *", "text": "x"},
        {"action": "create", "at": "2026-11-30T09:00:00", "text": "x"},
        {"action": "create", "at": "tomorrow 9am", "text": "x"},
        {"action": "create", "at": "2026-12-02T09:00:00", "timezone": "Mars/Olympus", "text": "x"},
        {"action": "create", "at": "2026-12-02T09:00:00", "timezone": "Europe", "text": "x"},
        {"action": "create", "at": "2026-12-02T09:00:00"},
        {"action": "create", "at": "2026-12-02T09:00:00", "cron": "0 9 * * *", "text": "x"},
        {"action": "create", "at": "2026-12-02T09:00:00", "text": "first"},
        {"action": "create", "at": "2026-12-03T09:00:00", "text": "over the limit"},
        {"action": "delete", "job_id": "nope"},
        {"action": "update"},
    ]
    blocks = [{"type": "tool_use", "id": f"t{i}", "name": "manage_cron_jobs", "input": c} for i, c in enumerate(calls)]
    fake_llm.script(ScriptedReply(content=blocks), reply_text("done"))
    async with build_services(settings, clock=clock) as services:
        gw = services.gateway
        await (await gw.submit(_msg("schedule things"))).text()
    results = [(bool(r.get("is_error")), str(r["content"])) for r in _tool_results(fake_llm)]
    expected = [
        "needs 5 fields",
        "more often than every 120 seconds",
        "is in the past",
        "not an ISO 8601 time",
        "unknown timezone 'Mars/Olympus'",
        "unknown timezone 'Europe'",
        "needs 'text'",
        "not both",
        "created job",
        "already has 1 jobs",
        "no job 'nope'",
        "needs the 'job_id'",
    ]
    assert len(results) == len(expected)
    for (is_error, text), words in zip(results, expected, strict=True):
        assert words in text
        assert is_error == (words != "created job")


async def test_update_moves_a_job_and_list_shows_it(
    running: tuple[Services, RecordingChannel], clock: ManualClock, fake_llm: FakeAnthropic
) -> None:
    services, channel = running
    gw = services.gateway
    made = await _create(gw, fake_llm, {"action": "create", "at": "2026-12-01T09:00:00", "text": "old"})
    job_id = made.split()[2].rstrip(";")
    updated = await _create(
        gw, fake_llm, {"action": "update", "job_id": job_id, "at": "2026-12-01T10:00:00", "text": "new"}
    )
    assert updated.startswith(f"updated job {job_id}") and "10:00" in updated
    listing = await _create(gw, fake_llm, {"action": "list"})
    assert job_id in listing and "text: new" in listing
    clock.advance(shanghai(2026, 12, 1, 10, 0) - clock())
    await channel.wait_for(1)
    assert channel.texts() == ["new"]  # the 09:00 entry went stale, nothing fired twice


async def test_a_prompt_job_runs_a_turn_queued_behind_the_chats_running_turn(
    running: tuple[Services, RecordingChannel], clock: ManualClock, fake_llm: FakeAnthropic
) -> None:
    services, channel = running
    gw = services.gateway
    made = await _create(
        gw, fake_llm, {"action": "create", "at": "2026-12-01T09:00:00", "prompt": "summarise the news"}
    )
    job_id = made.split()[2].rstrip(";")
    release = asyncio.Event()
    fake_llm.script(reply_text("user answer", hold=release), reply_text("here is the news"))
    user_turn = await gw.submit(_msg("a question"))
    clock.advance(shanghai(2026, 12, 1, 9, 0) - clock())
    await until(lambda: gw.queue_depth() == 2)  # the job's turn waits behind the running one
    release.set()
    assert await user_turn.text() == "user answer"
    [sent] = await channel.wait_for(1)
    assert sent.content == "here is the news"
    history = await gw.history.load(KEY)
    tail = [(m["role"], m.get("sender_id"), m["content"]) for m in history[-4:]]
    assert tail[0][2] == "a question" and tail[1][2] == "user answer"
    assert tail[2][:2] == ("user", "me") and history[-2]["scheduled_job"] == job_id  # its creator, marked
    assert "summarise the news" in str(tail[2][2])
    assert tail[3][:1] == ("assistant",) and tail[3][2] == "here is the news"


@pytest.mark.parametrize("name", ["Mars/Olympus", "America", "Etc"])  # also a folder of the zone database
def test_a_bad_default_timezone_stops_start_up_naming_the_key(
    settings_factory: Callable[..., Settings], name: str
) -> None:
    with pytest.raises(ConfigError, match=r"scheduler\.timezone: .*IANA") as caught:
        settings_factory(scheduler={"timezone": name})
    assert name not in str(caught.value)


async def test_jobs_created_in_many_chats_at_the_same_moment_are_all_stored(
    settings: Settings, clock: ManualClock, fake_llm: FakeAnthropic
) -> None:
    release = asyncio.Event()
    chats = [f"chat{i}" for i in range(20)]

    def respond(body: dict[str, Any]) -> ScriptedReply:
        last = body["messages"][-1]["content"]
        if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
            return reply_text("ok")
        at = "2026-12-01T09:00:00"
        return reply_tool("manage_cron_jobs", {"action": "create", "at": at, "text": "同时"}, hold=release)

    fake_llm.responder = respond
    async with build_services(settings, clock=clock) as services:
        gw = services.gateway
        handles = [await gw.submit(InboundMessage("cli", chat, "me", "remind me")) for chat in chats]
        await until(lambda: fake_llm.in_flight == len(chats))
        release.set()  # every model answer, and so every tool call, lands at once
        assert [await h.text() for h in handles] == ["ok"] * len(chats)
        assert len(_scheduler(services)) == len(chats)
    stored = json.loads((settings.data_dir / "default" / "jobs.json").read_text(encoding="utf-8"))
    assert sorted(j["chat_id"] for j in stored["jobs"]) == sorted(chats)


async def test_a_run_that_cannot_be_recorded_is_skipped_and_later_jobs_still_fire(
    running: tuple[Services, RecordingChannel], clock: ManualClock, fake_llm: FakeAnthropic, settings: Settings
) -> None:
    services, channel = running
    gw = services.gateway
    await _create(gw, fake_llm, {"action": "create", "at": "2026-12-01T09:00:00", "text": "unrecorded"})
    await _create(gw, fake_llm, {"action": "create", "at": "2026-12-01T09:05:00", "text": "later"})
    jobs = settings.data_dir / "default" / "jobs.json"
    saved = jobs.read_bytes()
    jobs.unlink()
    jobs.mkdir()  # the atomic replace onto a directory fails: the disk refuses the record
    with capture_logs() as logs:
        clock.advance(shanghai(2026, 12, 1, 9, 0) - clock())
        await until(lambda: any(e["event"] == "job_record_failed" for e in logs))
    jobs.rmdir()
    jobs.write_bytes(saved)
    clock.advance(shanghai(2026, 12, 1, 9, 5) - clock())
    await channel.wait_for(1)
    assert channel.texts() == ["later"]  # never sent without a record, and the loop lived on


async def test_a_job_the_disk_refuses_is_not_created(
    running: tuple[Services, RecordingChannel], fake_llm: FakeAnthropic, settings: Settings
) -> None:
    services, _ = running
    gw = services.gateway
    kept = await _create(gw, fake_llm, {"action": "create", "at": "2026-12-01T10:00:00", "text": "kept"})
    kept_id = kept.split()[2].rstrip(";")
    jobs = settings.data_dir / "default" / "jobs.json"
    jobs.unlink()
    jobs.mkdir()  # the atomic replace onto a directory fails: the disk refuses every change
    refused = await (await gw.submit(_msg(f"/jobs delete {kept_id}"))).result()
    assert isinstance(refused, ErrorEvent) and refused.message == "/jobs failed; please try again."
    fake_llm.script(
        reply_tool("manage_cron_jobs", {"action": "create", "at": "2026-12-01T09:00:00", "text": "x"}),
        reply_text("sorry"),
    )
    await (await gw.submit(_msg("remind me"))).text()
    result = _tool_results(fake_llm)[-1]
    assert result.get("is_error")
    assert result["content"] == "the jobs could not be read or saved (storage error); nothing was changed"
    assert [j.text for j in _scheduler(services).for_chat(KEY)] == ["kept"]  # neither created nor deleted


async def test_a_change_the_disk_refused_is_not_written_by_the_next_change(
    running: tuple[Services, RecordingChannel], fake_llm: FakeAnthropic, settings: Settings
) -> None:
    services, _ = running
    gw = services.gateway
    kept = await _create(gw, fake_llm, {"action": "create", "at": "2026-12-01T10:00:00", "text": "kept"})
    jobs = settings.data_dir / "default" / "jobs.json"
    saved = jobs.read_bytes()
    jobs.unlink()
    jobs.mkdir()  # the disk refuses the next changes
    refused = await (await gw.submit(_msg(f"/jobs delete {kept.split()[2].rstrip(';')}"))).result()
    assert isinstance(refused, ErrorEvent)
    fake_llm.script(
        reply_tool("manage_cron_jobs", {"action": "create", "at": "2026-12-01T09:00:00", "text": "refused"}),
        reply_text("sorry"),
    )
    await (await gw.submit(_msg("remind me"))).text()
    jobs.rmdir()
    jobs.write_bytes(saved)
    await _create(gw, fake_llm, {"action": "create", "at": "2026-12-01T11:00:00", "text": "next"})
    stored = json.loads(jobs.read_text(encoding="utf-8"))
    assert sorted(j["text"] for j in stored["jobs"]) == ["kept", "next"]  # neither refused change came back


async def test_a_recurring_job_whose_run_could_not_be_recorded_runs_again(
    running: tuple[Services, RecordingChannel], clock: ManualClock, fake_llm: FakeAnthropic, settings: Settings
) -> None:
    services, channel = running
    gw = services.gateway
    await _create(gw, fake_llm, {"action": "create", "cron": "0 9 * * *", "text": "daily"})
    jobs = settings.data_dir / "default" / "jobs.json"
    saved = jobs.read_bytes()
    jobs.unlink()
    jobs.mkdir()
    with capture_logs() as logs:
        clock.advance(shanghai(2026, 12, 1, 9, 0) - clock())
        await until(lambda: any(e["event"] == "job_record_failed" for e in logs))
    jobs.rmdir()
    jobs.write_bytes(saved)
    clock.advance(shanghai(2026, 12, 2, 9, 0) - clock())
    await channel.wait_for(1)
    await asyncio.sleep(0.1)
    assert channel.texts() == ["daily"]
    [job] = json.loads(jobs.read_text(encoding="utf-8"))["jobs"]
    assert job["next_due"] == shanghai(2026, 12, 3, 9, 0)


async def test_a_job_updated_without_moving_its_time_fires_once(
    running: tuple[Services, RecordingChannel], clock: ManualClock, fake_llm: FakeAnthropic
) -> None:
    services, channel = running
    gw = services.gateway
    made = await _create(gw, fake_llm, {"action": "create", "at": "2026-12-01T09:00:00", "text": "old words"})
    job_id = made.split()[2].rstrip(";")
    await _create(gw, fake_llm, {"action": "update", "job_id": job_id, "text": "new words"})
    await _create(gw, fake_llm, {"action": "create", "at": "2026-12-01T09:01:00", "text": "sentinel"})
    clock.advance(shanghai(2026, 12, 1, 9, 1) - clock())
    await channel.wait_for(2)
    assert channel.texts() == ["new words", "sentinel"]


async def test_with_no_catch_up_a_job_due_while_running_still_fires_however_late_the_wake(
    settings_factory: Callable[..., Settings], clock: ManualClock, fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory(scheduler={"catch_up_s": 0})
    channel = RecordingChannel()
    async with build_services(settings, clock=clock) as services:
        gw = services.gateway
        await start_scheduler(services, [channel])
        await _create(gw, fake_llm, {"action": "create", "at": "2026-12-01T09:00:00", "text": "on time"})
        clock.advance(shanghai(2026, 12, 1, 9, 0, 5) - clock())  # the loop wakes 5 s after the due time
        await channel.wait_for(1)
        await stop_scheduler(services)
    assert channel.texts() == ["on time"]


async def test_stopping_lets_a_fired_job_finish_its_send_within_the_grace(
    settings: Settings, clock: ManualClock, fake_llm: FakeAnthropic
) -> None:
    platform_slow = asyncio.Event()

    class SlowPlatform(RecordingChannel):
        async def send(self, message: OutboundMessage) -> None:
            await platform_slow.wait()
            await super().send(message)

    channel = SlowPlatform()
    async with build_services(settings, clock=clock) as services:
        gw = services.gateway
        await start_scheduler(services, [channel])
        await _create(gw, fake_llm, {"action": "create", "at": "2026-12-01T09:00:00", "text": "in flight"})
        clock.advance(shanghai(2026, 12, 1, 9, 0) - clock())
        await until(lambda: _scheduler(services).fired == 1)
        stopping = asyncio.create_task(stop_scheduler(services, grace_s=10.0))
        await asyncio.sleep(0)
        assert not stopping.done()
        platform_slow.set()
        await stopping
    assert channel.texts() == ["in flight"]


async def test_a_damaged_job_entry_is_skipped_and_the_rest_still_fire(settings: Settings, clock: ManualClock) -> None:
    good = {
        "id": "good0001",
        "agent": "default",
        "channel": "cli",
        "chat_id": "direct",
        "timezone": "Asia/Shanghai",
        "created_at": START,
        "at": START + 60,
        "text": "still here",
        "next_due": START + 60,
    }
    damaged = [{**good, "id": "bad00001", "next_due": "soon"}, {**good, "id": "bad00002", "timezone": 8}, {"id": "x"}]
    path = settings.data_dir / "default" / "jobs.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"version": 1, "jobs": [*damaged, good]}), encoding="utf-8")
    channel = RecordingChannel()
    async with build_services(settings, clock=clock) as services:
        await start_scheduler(services, [channel])
        assert [j.id for j in _scheduler(services).for_agent("default")] == ["good0001"]
        clock.advance(60)
        await channel.wait_for(1)
        await stop_scheduler(services)
    assert channel.texts() == ["still here"]


async def _tool_call(gw: GatewayCore, fake: FakeAnthropic, args: dict[str, Any]) -> tuple[bool, str]:
    fake.script(reply_tool("manage_cron_jobs", args), reply_text("ok"))
    await (await gw.submit(_msg("change it"))).text()
    result = _tool_results(fake)[-1]
    return bool(result.get("is_error")), str(result["content"])


async def test_update_changes_every_field_and_refuses_an_empty_one(
    running: tuple[Services, RecordingChannel], fake_llm: FakeAnthropic
) -> None:
    services, _ = running
    gw = services.gateway
    made = await _create(gw, fake_llm, {"action": "create", "at": "2026-12-02T09:00:00", "text": "a"})
    job_id = made.split()[2].rstrip(";")

    def job() -> Job:
        found = _scheduler(services).get("default", job_id)
        assert found is not None
        return found

    is_error, text = await _tool_call(gw, fake_llm, {"action": "update", "job_id": job_id})
    assert is_error and "nothing to change" in text
    # a one-off moved to another zone keeps its wall-clock time there
    await _create(gw, fake_llm, {"action": "update", "job_id": job_id, "timezone": "Europe/Berlin"})
    berlin_nine = dt.datetime(2026, 12, 2, 9, 0, tzinfo=ZoneInfo("Europe/Berlin")).timestamp()
    assert (job().timezone, job().at, job().next_due) == ("Europe/Berlin", berlin_nine, berlin_nine)
    await _create(gw, fake_llm, {"action": "update", "job_id": job_id, "prompt": "p"})
    assert (job().text, job().prompt) == (None, "p")
    await _create(gw, fake_llm, {"action": "update", "job_id": job_id, "cron": "0 9 * * *"})
    assert (job().cron, job().at, job().next_due) == ("0 9 * * *", None, berlin_nine - 86400)  # 01:00 there now
    await _create(gw, fake_llm, {"action": "update", "job_id": job_id, "timezone": "Asia/Shanghai"})
    assert job().next_due == shanghai(2026, 12, 1, 9, 0)
    await _create(gw, fake_llm, {"action": "update", "job_id": job_id, "at": "2026-12-03T07:00:00", "text": "t"})
    assert (job().cron, job().next_due, job().text, job().prompt) == (None, shanghai(2026, 12, 3, 7), "t", None)
    # moving a one-off to a zone where its wall-clock time has passed is refused, the job kept as it was
    is_error, text = await _tool_call(gw, fake_llm, {"action": "update", "job_id": job_id, "at": "2026-12-01T08:30:00"})
    assert not is_error
    is_error, text = await _tool_call(gw, fake_llm, {"action": "update", "job_id": job_id, "timezone": "Asia/Tokyo"})
    assert is_error and "in the past" in text and job().timezone == "Asia/Shanghai"


async def test_a_job_made_where_no_scheduler_runs_says_it_fires_only_while_the_daemon_runs(
    settings: Settings, clock: ManualClock, fake_llm: FakeAnthropic
) -> None:
    async with build_services(settings, clock=clock) as services:  # a stand-alone `agenthub chat`: nothing fires jobs
        gw = services.gateway
        alone = await _create(gw, fake_llm, {"action": "create", "cron": "0 9 * * *", "text": "daily"})
        await start_scheduler(services, [RecordingChannel()])  # what `agenthub serve` does once its channels run
        served = await _create(gw, fake_llm, {"action": "create", "cron": "0 10 * * *", "text": "daily too"})
        job_id = served.split()[2].rstrip(";")
        updated = await _create(gw, fake_llm, {"action": "update", "job_id": job_id, "text": "changed"})
        await stop_scheduler(services)
    assert alone.startswith("created job ") and "only while `agenthub serve` runs" in alone
    assert served.startswith("created job ") and "agenthub serve" not in served
    assert updated.startswith("updated job ") and "agenthub serve" not in updated
