"""Times told to the model and read from questions are on the clock of `scheduler.timezone`, not the daemon process's
(these tests run in a UTC process serving Asia/Shanghai)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any
from zoneinfo import ZoneInfo

from agenthub.agent.recall import render
from agenthub.agent.tools import BUILTIN_TOOLS, ToolContext, run_tool
from agenthub.gateway.core import GatewayCore
from agenthub.messages import DoneEvent, InboundMessage
from agenthub.search.when import time_ask
from agenthub.session_keys import SessionKey
from agenthub.storage.search_index import Passage, SearchHit, history_source
from tests.support.fakes.anthropic import FakeAnthropic, reply_text

SHANGHAI = ZoneInfo("Asia/Shanghai")


def _ms(day: int, hour: int, minute: int = 0) -> int:
    return int(dt.datetime(2026, 12, day, hour, minute, tzinfo=SHANGHAI).timestamp() * 1000)


ASKED = _ms(4, 9)  # 2026-12-04 09:00 in Shanghai, 01:00 UTC


def _user(text: str, ts: int) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": ts}


def _in_window(question: str, ts: int) -> bool:
    asked = time_ask(question, ASKED, SHANGHAI)
    assert asked is not None and asked.window is not None, question
    start, end = asked.window
    return start <= ts < end


def test_yesterday_is_the_configured_zones_yesterday() -> None:
    for question in ("What did we say yesterday?", "我们昨天说了什么？"):
        assert _in_window(question, _ms(3, 23, 30))
        assert _in_window(question, _ms(3, 2))  # Shanghai's yesterday, two days ago in UTC
        assert not _in_window(question, _ms(4, 7, 30))  # Shanghai's today, yesterday in UTC


async def test_memory_search_reads_days_and_shows_times_in_the_configured_zone(gateway: GatewayCore) -> None:
    assert gateway.settings.scheduler.timezone == "Asia/Shanghai"
    key = SessionKey("default", "cli", "direct")
    await gateway.history.append(key, _user("the launch code was ALPHA", _ms(3, 2)))
    await gateway.history.append(key, _user("the launch code is BRAVO", _ms(3, 23, 30)))
    await gateway.history.append(key, _user("the launch code is CHARLIE now", _ms(4, 7, 30)))
    await gateway.history.append(key, _user("what did we say yesterday about the launch code?", ASKED))
    definition = gateway.agents.get("default")
    workspace = gateway.settings.workspace_dir / "default"
    zone = gateway.settings.scheduler.zone
    ctx = ToolContext(definition, key, "me", gateway.memory_files, workspace, search=gateway.search, zone=zone)
    query = "what did we say yesterday about the launch code?"
    text, is_error = await run_tool(gateway.tools.for_agent(definition), "memory_search", {"query": query}, ctx)
    assert not is_error, text
    hits = [line for line in text.splitlines() if line[:1].isdigit()]
    assert "CHARLIE" in hits[-1] and all("CHARLIE" not in hit for hit in hits[:2]), text  # today's is not lifted
    assert "2026-12-03T23:30:00+08:00" in text and "15:30" not in text, text


def test_recalled_passages_show_the_configured_zones_time() -> None:
    passage = Passage(history_source("default:cli:direct"), 1, "user", None, _ms(3, 23, 30), "the code is BRAVO")
    text = render([SearchHit(passage, 1.0)], 500, SHANGHAI)
    assert "2026-12-03 23:30 CST" in text and "15:30" not in text, text


async def test_a_turn_tells_the_model_its_messages_times_in_the_configured_zone(
    gateway: GatewayCore, fake_llm: FakeAnthropic
) -> None:
    key = SessionKey("default", "cli", "direct")
    await gateway.history.append(key, _user("we met yesterday", _ms(3, 23, 30)))
    await gateway.history.append(key, {"role": "assistant", "content": [{"type": "text", "text": "noted"}]})
    fake_llm.script(reply_text("done"))
    events = [e async for e in await gateway.submit(InboundMessage("cli", "direct", "me", "what time is it?"))]
    assert isinstance(events[-1], DoneEvent), events[-1]
    sent = json.dumps(fake_llm.message_requests()[-1].body)
    assert "2026-12-03 23:30 CST" in sent and "15:30" not in sent, sent


async def test_the_time_tool_tells_the_configured_zones_time(gateway: GatewayCore) -> None:
    key = SessionKey("default", "cli", "direct")
    workspace = gateway.settings.workspace_dir / "default"
    definition = gateway.agents.get("default")
    ctx = ToolContext(definition, key, "me", gateway.memory_files, workspace, zone=gateway.settings.scheduler.zone)
    before = dt.datetime.now(SHANGHAI).replace(microsecond=0)
    told, is_error = await run_tool([BUILTIN_TOOLS["get_time"]], "get_time", {}, ctx)
    assert not is_error and told.endswith("+08:00"), told
    assert before <= dt.datetime.fromisoformat(told) <= dt.datetime.now(SHANGHAI), told
