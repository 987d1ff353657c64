"""Memory logic on a small in-test host (no gateway, no HTTP server): the L2 after-turn decision and its
apply-if-unchanged, AutoCompact's idle re-check when the user returns mid-compaction, L3 picking by activity."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agenthub.agent.conversion import SUMMARY_PREFIX
from agenthub.memory.host import FinishedTurn
from agenthub.memory.wiring import build_memory_layer
from agenthub.session_keys import SessionKey
from tests.support.fakes.memory_host import FakeMemoryHost

KEY = SessionKey("default", "cli", "c1")
L2 = {"consolidate_at_tokens": 1000, "keep_recent": 4, "flush_before_compaction": False}
IDLE = {
    "autocompact_summary": True,
    "autocompact_min_messages": 10,
    "autocompact_keep": 4,
    "autocompact_idle_s": 600,
    "flush_before_compaction": False,
}


def conversation(pairs: int, start: int = 0) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for i in range(start, start + pairs):
        records.append({"role": "user", "content": f"question {i}", "timestamp": 1_700_000_000_000 + i})
        records.append({"role": "assistant", "content": f"answer {i}", "timestamp": 1_700_000_000_500 + i})
    return records


async def seeded(root: Path, memory: dict[str, Any], key: SessionKey = KEY, pairs: int = 10) -> FakeMemoryHost:
    host = FakeMemoryHost(root, memory=memory)
    await host.history.append(key, *conversation(pairs))
    return host


def finished(host: FakeMemoryHost, prompt_tokens: int, *, ok: bool = True) -> FinishedTurn:
    return FinishedTurn(KEY, host.agent, "u1", ok, host.model, host.model.default_model, prompt_tokens)


def notice_keys(host: FakeMemoryHost, key: SessionKey = KEY) -> list[str]:
    return [text.key for text in host.notices.get(key, [])]


async def test_l2_compacts_in_the_background_once_a_turn_reached_the_threshold_and_only_once(tmp_path: Path) -> None:
    host = await seeded(tmp_path, L2)
    compactor = build_memory_layer(host).compactor
    await compactor.after_turn(finished(host, 999))
    await compactor.after_turn(finished(host, 50_000, ok=False))
    assert host.background(KEY) is None and host.model.requests == []

    host.model.gate.clear()
    await compactor.after_turn(finished(host, 1000))
    task = host.background(KEY)
    assert task is not None
    await host.model.called.wait()
    await compactor.after_turn(finished(host, 2000))  # one compaction per session at a time
    assert host.background(KEY) is task and len(host.model.requests) == 1
    host.model.gate.set()
    await asyncio.wait([task])

    history = await host.history.load(KEY)
    assert history[0]["kind"] == "summary" and history[0]["content"].startswith(SUMMARY_PREFIX)
    assert history[1:] == conversation(10)[-4:]
    assert host.history.archives[KEY] == conversation(10)[:-4]
    assert notice_keys(host) == ["compaction.notice.summarised"]


async def test_l2_keeps_what_was_appended_while_the_summary_was_written(tmp_path: Path) -> None:
    host = await seeded(tmp_path, L2)
    compactor = build_memory_layer(host).compactor
    host.model.gate.clear()
    await compactor.after_turn(finished(host, 1000))
    task = host.background(KEY)
    assert task is not None
    await host.model.called.wait()
    await host.history.append(KEY, *conversation(1, start=10))
    host.model.gate.set()
    await asyncio.wait([task])

    history = await host.history.load(KEY)
    assert history[0]["kind"] == "summary"
    assert history[1:] == conversation(10)[-4:] + conversation(1, start=10)


async def test_l2_abandons_the_summary_when_the_history_was_replaced_meanwhile(tmp_path: Path) -> None:
    host = await seeded(tmp_path, L2)
    compactor = build_memory_layer(host).compactor
    host.model.gate.clear()
    await compactor.after_turn(finished(host, 1000))
    task = host.background(KEY)
    assert task is not None
    await host.model.called.wait()
    fresh = conversation(1, start=100)
    await host.history.replace(KEY, fresh)  # e.g. /restart cleared the chat and the user wrote again
    host.model.gate.set()
    await asyncio.wait([task])

    assert await host.history.load(KEY) == fresh
    assert host.history.archives[KEY] == conversation(10)  # only what the replace itself set aside
    assert notice_keys(host) == []


@pytest.mark.parametrize("returns", ["never", "with_a_message", "with_a_waiting_turn"])
async def test_autocompact_applies_its_summary_only_if_the_user_did_not_return_meanwhile(
    tmp_path: Path, returns: str
) -> None:
    host = await seeded(tmp_path, IDLE)
    autocompact = build_memory_layer(host).autocompact
    host.clock.advance(601)
    host.model.gate.clear()
    sweep = asyncio.create_task(autocompact.tick())
    await host.model.called.wait()  # the summary is being written: the chat is not held meanwhile
    came_back = conversation(1, start=10)[:1]
    if returns == "with_a_message":
        host.live[KEY] = host.clock()
        await host.history.append(KEY, *came_back)
    elif returns == "with_a_waiting_turn":
        host.pending.add(KEY)
    host.model.gate.set()
    await asyncio.wait_for(sweep, 10)

    history = await host.history.load(KEY)
    if returns == "never":
        assert history[0]["kind"] == "summary" and history[1:] == conversation(10)[-4:]
        assert notice_keys(host) == ["compaction.notice.summarised"]
        return
    assert history == conversation(10) + (came_back if returns == "with_a_message" else [])
    assert KEY not in host.history.archives and notice_keys(host) == []


async def test_autocompact_leaves_sessions_with_recent_activity_alone(tmp_path: Path) -> None:
    host = await seeded(tmp_path, {**IDLE, "autocompact_summary": False})
    old = SessionKey("default", "cli", "old")
    await host.history.append(old, *conversation(10))
    host.clock.advance(601)
    await host.history.append(KEY, *conversation(1, start=10))  # active just now
    await build_memory_layer(host).autocompact.tick()

    assert len(await host.history.load(KEY)) == 22
    assert len(await host.history.load(old)) == 4
    assert notice_keys(host, old) == ["compaction.notice.set_aside"]
    assert set(host.history.evicted) == {old}  # a sweep does not leave what it read cached


async def test_l3_reads_the_sessions_that_changed_last_and_nothing_when_none_changed(tmp_path: Path) -> None:
    host = FakeMemoryHost(tmp_path, memory={"l3_sessions": 2})
    for chat in ("c1", "c2", "c3"):
        await host.history.append(SessionKey("default", "cli", chat), *conversation(2))
        host.clock.advance(10)
    host.model.answer = "- the user works on project X\n"
    processor = build_memory_layer(host).processor

    await processor.tick()
    first = [str(r.messages[0]["content"]) for r in host.model.requests]
    assert len(first) == 2  # the agent's MEMORY.md and the shared USER.md
    for material in first:
        assert "## chat cli/c3" in material and "## chat cli/c2" in material and "cli/c1" not in material
    assert await host.memory_files.read(host.memory_files.l3_state_name(host.agent))

    await processor.tick()
    assert len(host.model.requests) == 2  # nothing changed since the last run

    host.clock.advance(10)
    await host.history.append(SessionKey("default", "cli", "c1"), *conversation(1, start=2))
    await processor.tick()
    latest = [str(r.messages[0]["content"]) for r in host.model.requests[2:]]
    assert len(latest) == 2
    for material in latest:
        assert "## chat cli/c1" in material and "## chat cli/c3" in material and "cli/c2" not in material
