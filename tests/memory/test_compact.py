"""Manual compaction (/compact and the gateway's compactor), its audit line, and summaries surviving a restart."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from structlog.testing import capture_logs

from agenthub.config import Settings
from agenthub.errors import SessionBusyError
from agenthub.hosting.app import build_gateway
from agenthub.messages import DoneEvent
from tests.support.fakes.anthropic import FakeAnthropic, hang, reply_text
from tests.support.memory import (
    conversation,
    is_summary_request,
    msg,
    seed,
    settle,
    summaries_then_default,
    system_text,
)

SUMMARY = "用户要部署项目 X 到 staging；端口 8443。"


async def test_compact_command_summarises_archives_and_audits(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    fake_llm.responder = summaries_then_default(SUMMARY)
    async with build_gateway(settings_factory()) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 25)
        with capture_logs() as logs:
            final = await (await gw.submit(msg("/compact", sender="alice"))).result()
        assert isinstance(final, DoneEvent) and final.full_text.startswith("Compacted: 30 earlier messages")
        history = await gw.history.load(key)
        assert len(history) == 21 and SUMMARY in history[0]["content"]
        archived = await gw.history.archived(key)
        assert [m["content"] for m in archived] == [m for i in range(15) for m in (f"question {i}", f"answer {i}")]
        audits = [e for e in logs if e["event"] == "compaction_audit"]
        assert len(audits) == 1
        line = audits[0]
        assert line["actor"] == "alice" and line["reason"] == "manual"
        assert line["cut_index"] == 30 and line["kept"] == 20 and line["archived"] == 30
        assert line["summary_chars"] == len(history[0]["content"]) and line["at"].startswith("20")


async def test_compact_with_little_history_says_so_and_changes_nothing(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    async with build_gateway(settings_factory()) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 5)
        final = await (await gw.submit(msg("/compact"))).result()
        assert isinstance(final, DoneEvent) and final.full_text.startswith("Nothing to compact")
        assert len(await gw.history.load(key)) == 10
        assert fake_llm.message_requests() == []


async def test_compact_while_a_turn_runs_answers_busy(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    async with build_gateway(settings_factory()) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 25)
        fake_llm.script(hang())
        await gw.submit(msg("slow question"))
        await fake_llm.wait_for_requests(1)
        final = await (await gw.submit(msg("/compact"))).result()
        assert isinstance(final, DoneEvent) and "busy" in final.full_text
        assert gw.turn_services.compactor is not None
        with pytest.raises(SessionBusyError):
            await gw.turn_services.compactor.compact(key, gw.agents.get("default"), reason="manual", actor="http")
        gw.abort(key)
        await settle(gw, key)
        assert len(await gw.history.load(key)) == 51  # untouched: 50 seeded + the user message
        assert not gw.history.layout("default").archive_file(key).exists()


async def test_the_summary_is_folded_into_the_request_after_a_restart(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory()
    fake_llm.responder = summaries_then_default(SUMMARY)
    async with build_gateway(settings) as gw:
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 25)
        await (await gw.submit(msg("/compact"))).result()
    async with build_gateway(settings) as fresh:  # a new process: nothing cached, no sessions
        fake_llm.script(reply_text("welcome back"))
        final = await (await fresh.submit(msg("where were we?"))).result()
        assert isinstance(final, DoneEvent)
        body = fake_llm.message_requests()[-1].body or {}
        assert not is_summary_request(body)
        assert SUMMARY in system_text(body)
        assert body["messages"][0]["content"][0]["text"].startswith("question 15")
        history = await fresh.history.load(key)
        assert len(conversation(history)) == 22
