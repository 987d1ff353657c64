"""AutoCompact: idle big sessions are cut to their last 20 (archived first); small, fresh and busy ones are not."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import build_services
from agenthub.memory.wiring import AUTOCOMPACT_TIMER, L3_TIMER
from agenthub.messages import DoneEvent
from agenthub.session_keys import SessionKey
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, hang, reply_text
from tests.support.memory import is_summary_request, msg, seed, settle, summaries_then_default


def _age(gw: GatewayCore, key: SessionKey, seconds: float = 1200) -> None:
    path = gw.history.layout(key.agent).history_file(key)
    then = time.time() - seconds
    os.utime(path, (then, then))


async def test_idle_big_sessions_are_cut_and_others_untouched(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    async with build_services(settings_factory()) as services:
        gw = services.gateway
        assert gw.timers[AUTOCOMPACT_TIMER].started and gw.timers[L3_TIMER].started
        big, small, fresh, busy = (gw.resolve_key(msg("x", chat=c))[1] for c in ("big", "small", "fresh", "busy"))
        await seed(gw, big, 75)
        await seed(gw, small, 25)
        await seed(gw, fresh, 75)
        await seed(gw, busy, 75)
        fake_llm.script(hang())
        await gw.submit(msg("still thinking", chat="busy"))
        await fake_llm.wait_for_requests(1)
        for key in (big, small, busy):
            _age(gw, key)
        layout = gw.history.layout("default")
        small_bytes = layout.history_file(small).read_bytes()

        await gw.timers[AUTOCOMPACT_TIMER].tick_now()

        after = await gw.history.load(big)
        assert len(after) == 20
        assert after[0]["content"] == "question 65" and after[-1]["content"] == "answer 74"
        archived = await gw.history.archived(big)
        assert len(archived) == 130 and archived[0]["content"] == "question 0"
        assert layout.history_file(small).read_bytes() == small_bytes
        assert len(await gw.history.load(fresh)) == 150
        assert len(await gw.history.load(busy)) == 151
        for key in (small, fresh, busy):
            assert not layout.archive_file(key).exists()
        assert len(fake_llm.message_requests()) == 1  # only the hung turn: no LLM call without the summary option
        busy_key = busy
        gw.abort(busy_key)
        await settle(gw, busy_key)
    assert not gw.timers[AUTOCOMPACT_TIMER].started


async def test_the_summary_option_summarises_what_is_cut(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory()
    write_agent(settings.agents_dir, "default", {"memory": {"autocompact_summary": True}})
    fake_llm.responder = summaries_then_default("idle summary")
    async with build_services(settings) as services:
        gw = services.gateway
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 60)
        _age(gw, key)
        await gw.timers[AUTOCOMPACT_TIMER].tick_now()
        history = await gw.history.load(key)
        assert len(history) == 21 and history[0]["content"] == "[历史摘要]\nidle summary"
        assert len(await gw.history.archived(key)) == 100
        kinds = [is_summary_request(r.body or {}) for r in fake_llm.message_requests()]
        assert kinds == [False, True]  # the memory flush, then the summary
        memory_request = str(fake_llm.message_requests()[0].body)
        assert "MEMORY.md" in memory_request and "question 0" in memory_request


async def test_an_earlier_summary_survives_plain_truncation(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    async with build_services(settings_factory()) as services:
        gw = services.gateway
        key = gw.resolve_key(msg("x"))[1]
        await gw.history.append(key, {"role": "system", "content": "[历史摘要]\nkeep me"})
        await seed(gw, key, 60)
        _age(gw, key)
        await gw.timers[AUTOCOMPACT_TIMER].tick_now()
        history = await gw.history.load(key)
        assert history[0]["content"] == "[历史摘要]\nkeep me" and len(history) == 21
        assert len(await gw.history.archived(key)) == 100


async def test_an_idle_session_over_the_threshold_in_tokens_is_cut_though_it_has_few_messages(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory()
    write_agent(settings.agents_dir, "default", {"memory": {"consolidate_at_tokens": 5000}})
    async with build_services(settings) as services:
        gw = services.gateway
        key = gw.resolve_key(msg("x", chat="pasted"))[1]
        paste = "一段很长的日志。" * 150  # about 1,200 tokens each (one per CJK character)
        for i in range(5):
            await gw.history.append(
                key, {"role": "user", "content": f"{i}: {paste}"}, {"role": "assistant", "content": f"noted {i}"}
            )
        _age(gw, key)

        await gw.timers[AUTOCOMPACT_TIMER].tick_now()

        after = await gw.history.load(key)
        archived = await gw.history.archived(key)
        assert 0 < len(after) < 10  # only 10 messages, yet over the 5000-token threshold: cut to fit half of it
        assert len(after) + len(archived) == 10  # nothing lost
        assert after[0]["role"] == "user"
        assert len(fake_llm.message_requests()) == 0


async def test_a_session_whose_user_came_back_during_the_sweep_is_not_cut(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory(memory={"flush_before_compaction": False})
    write_agent(settings.agents_dir, "default", {"memory": {"autocompact_summary": True}})
    release = asyncio.Event()
    fake_llm.responder = lambda body: reply_text("idle summary", hold=release) if is_summary_request(body) else None
    async with build_services(settings) as services:
        gw = services.gateway
        slow, back = (gw.resolve_key(msg("x", chat=c))[1] for c in ("a-slow", "b-back"))
        for key in (slow, back):
            await seed(gw, key, 75)
            _age(gw, key)
        sweep = asyncio.create_task(gw.timers[AUTOCOMPACT_TIMER].tick_now())
        await fake_llm.wait_for_requests(1)  # the sweep is summarising the first chat; both were idle when listed
        answer = await (await gw.submit(msg("I'm back", chat="b-back"))).result()
        assert isinstance(answer, DoneEvent)
        release.set()
        await asyncio.wait_for(sweep, 10)
        assert len(await gw.history.load(slow)) == 21  # summary + last 20
        assert len(await gw.history.load(back)) == 152  # its user came back: kept whole
        assert not gw.history.layout("default").archive_file(back).exists()


async def test_a_user_who_comes_back_while_the_summary_is_written_keeps_the_chat_whole(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    settings = settings_factory(memory={"flush_before_compaction": False})
    write_agent(settings.agents_dir, "default", {"memory": {"autocompact_summary": True}})
    release = asyncio.Event()
    fake_llm.responder = lambda body: reply_text("idle summary", hold=release) if is_summary_request(body) else None
    async with build_services(settings) as services:
        gw = services.gateway
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 75)
        _age(gw, key)
        sweep = asyncio.create_task(gw.timers[AUTOCOMPACT_TIMER].tick_now())
        await fake_llm.wait_for_requests(1)
        answer = await asyncio.wait_for((await gw.submit(msg("I'm back"))).result(), 10)  # not blocked by it
        assert isinstance(answer, DoneEvent)
        release.set()
        await asyncio.wait_for(sweep, 10)
        assert len(await gw.history.load(key)) == 152


async def test_plain_truncation_rechecks_idleness_right_before_the_cut(
    settings_factory: Callable[..., Settings], fake_llm: FakeAnthropic
) -> None:
    async with build_services(settings_factory()) as services:
        gw = services.gateway
        key = gw.resolve_key(msg("x"))[1]
        await seed(gw, key, 75)  # written just now, after an (earlier) scan would have listed it as idle
        assert services.memory is not None
        await services.memory.autocompact.compact_session(key, gw.agents.get("default"))
        assert len(await gw.history.load(key)) == 150
        _age(gw, key)
        await services.memory.autocompact.compact_session(key, gw.agents.get("default"))
        assert len(await gw.history.load(key)) == 20
