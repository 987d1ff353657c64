"""Cut safety: over random histories of text and tool exchanges, no compaction ever orphans a tool_use/tool_result."""

from __future__ import annotations

import asyncio
import itertools
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agenthub.agent.conversion import to_api_messages
from agenthub.hosting.app import build_services
from agenthub.memory.cut import plan_cut, safe_cut, unpaired_tool_ids
from agenthub.messages import InboundMessage
from agenthub.session_keys import SessionKey, session_key
from tests.support.fakes.anthropic import FakeAnthropic
from tests.support.memory import conversation, summaries_then_default
from tests.support.roots import make_settings

Message = dict[str, Any]


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    ids = itertools.count()
    history: list[Message] = []
    if draw(st.booleans()):
        history.append({"role": "system", "content": "[历史摘要]\nearlier"})
    for _ in range(draw(st.integers(1, 20))):
        history.append({"role": "user", "content": f"q{next(ids)} " + "字" * draw(st.integers(0, 80))})
        for _ in range(draw(st.integers(0, 3))):
            tool_ids = [f"toolu_{next(ids)}" for _ in range(draw(st.integers(1, 3)))]
            intro = [{"type": "text", "text": "checking"}] if draw(st.booleans()) else []
            uses = [{"type": "tool_use", "id": t, "name": "read_memory", "input": {}} for t in tool_ids]
            history.append({"role": "assistant", "content": intro + uses})
            size = draw(st.integers(0, 400))
            results = [{"type": "tool_result", "tool_use_id": t, "content": "r" * size} for t in tool_ids]
            history.append({"role": "user", "content": results})
        if draw(st.integers(0, 9)):  # sometimes a failed turn leaves only the user message
            history.append({"role": "assistant", "content": f"a{next(ids)}"})
    return history


def reused_ids(history: list[Message]) -> list[Message]:
    """The same history with ids as some vendors make them (Kimi: `functions.<name>:<index>`, again every turn):
    the same id appears in many exchanges, and only adjacency tells which result answers which call."""
    renamed: list[Message] = []
    names: dict[str, str] = {}
    for message in history:
        content = message["content"]
        if not isinstance(content, list):
            renamed.append(message)
            continue
        blocks: list[dict[str, Any]] = []
        for block in content:
            if block["type"] == "tool_use":
                names[block["id"]] = f"functions.{block['name']}:{len([b for b in blocks if b['type'] == 'tool_use'])}"
                block = {**block, "id": names[block["id"]]}
            elif block["type"] == "tool_result":
                block = {**block, "tool_use_id": names[block["tool_use_id"]]}
            blocks.append(block)
        renamed.append({**message, "content": blocks})
    return renamed


@given(histories(), st.integers(1, 30))
@settings(max_examples=120, deadline=None)
def test_reused_tool_ids_cut_exactly_where_unique_ids_do(history: list[Message], keep: int) -> None:
    reused = reused_ids(history)  # (no token budget: longer ids would cost more tokens and move a budgeted cut)
    assert unpaired_tool_ids(reused) == set()
    unique_cut, reused_cut = plan_cut(history, keep), plan_cut(reused, keep)
    assert (unique_cut and unique_cut.index) == (reused_cut and reused_cut.index)
    targets = range(len(history) + 1)
    assert [safe_cut(reused, t) for t in targets] == [safe_cut(history, t) for t in targets]
    if reused_cut is not None:
        assert unpaired_tool_ids(reused_cut.tail) == set() and unpaired_tool_ids(reused_cut.head) == set()


def _fingerprints(messages: list[Message]) -> Counter[str]:
    return Counter(repr(m) for m in messages)


@given(histories(), st.integers(1, 30), st.one_of(st.none(), st.integers(1, 3000)))
@settings(max_examples=120, deadline=None)
def test_plan_cut_never_separates_a_tool_pair(history: list[Message], keep: int, budget: int | None) -> None:
    assert unpaired_tool_ids(history) == set()
    cut = plan_cut(history, keep, budget)
    if cut is None:
        return
    assert unpaired_tool_ids(cut.tail) == set()
    assert unpaired_tool_ids(cut.head) == set()
    assert len(cut.tail) >= (min(keep, len(history)) if budget is None else 1)
    assert cut.tail == history[cut.index :]
    assert cut.head == [m for m in history[: cut.index] if m["role"] != "system"] and cut.head
    api = to_api_messages(cut.tail)  # what the next request sends: valid for the Messages API
    assert api[0]["role"] == "user"
    assert all(a["role"] != b["role"] for a, b in itertools.pairwise(api))
    assert unpaired_tool_ids(api) == set()


@given(histories(), st.integers(0, 80))
@settings(max_examples=120, deadline=None)
def test_safe_cut_only_moves_earlier(history: list[Message], target: int) -> None:
    c = safe_cut(history, target)
    assert 0 <= c <= min(target, len(history))
    if c:
        assert unpaired_tool_ids(history[c:]) == set()


def _check(before: list[Message], after: list[Message], archived: list[Message]) -> None:
    assert unpaired_tool_ids(after) == set()
    # nothing lost: every original message is in the working history or the archive
    assert _fingerprints(conversation(before)) == _fingerprints(conversation(after) + conversation(archived))


async def _scenario(root: Path, history: list[Message], keep: int, budget: int | None) -> None:
    async with FakeAnthropic(responder=summaries_then_default("s")) as fake:
        memory = {"autocompact_min_messages": 2, "autocompact_keep": max(2, keep), "autocompact_idle_s": 0}
        config = make_settings(root, fake.base_url, memory=memory, session={"fsync": False})
        async with build_services(config) as services:
            gw = services.gateway
            agent = gw.agents.get("default")
            assert services.memory is not None
            compactor, autocompact = services.memory.compactor, services.memory.autocompact
            provider, model = compactor.provider_for(agent)
            runs: dict[str, Callable[[SessionKey], Awaitable[object]]] = {
                "l2": lambda key: compactor.run(
                    key, agent, reason="t", actor="t", provider=provider, model=model, tail_budget=budget, keep=keep
                ),
                "manual": lambda key: compactor.compact(key, agent, reason="manual", actor="t"),
                "autocompact": lambda key: autocompact.compact_session(key, agent),
            }
            for name, run in runs.items():
                key = session_key("default", "cli", name)
                await gw.history.append(key, *history)
                before = await gw.history.load(key)
                await run(key)
                _check(before, await gw.history.load(key), await gw.history.archived(key))


@given(histories(), st.integers(1, 25), st.one_of(st.none(), st.integers(1, 2000)))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_every_compaction_path_keeps_tool_pairs_and_loses_nothing(
    monkeypatch: pytest.MonkeyPatch, history: list[Message], keep: int, budget: int | None
) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_scenario(Path(tmp), history, keep, budget))


async def test_compact_works_when_the_vendor_reuses_tool_ids_every_turn(
    settings_factory: Callable[..., Any], fake_llm: FakeAnthropic
) -> None:
    fake_llm.responder = summaries_then_default("用户每轮都问时间。")
    turns: list[Message] = []
    for i in range(15):  # 60 messages; every turn's call has the same id, as Kimi's `functions.get_time:0`
        call = {"type": "tool_use", "id": "functions.get_time:0", "name": "get_time", "input": {}}
        turns += [
            {"role": "user", "content": f"what time is it? ({i})"},
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": f"1{i}:00"}]},
            {"role": "assistant", "content": f"It is 1{i}:00."},
        ]
    async with build_services(settings_factory()) as services:
        gw = services.gateway
        key = session_key("default", "cli", "c1")
        await gw.history.append(key, *turns)
        final = await (await gw.submit(InboundMessage("cli", "c1", "u1", "/compact"))).result()
        assert getattr(final, "full_text", "").startswith("Compacted: 40 earlier messages")
        history = await gw.history.load(key)
        assert len(history) == 21 and history[1]["content"] == "what time is it? (10)"
        assert unpaired_tool_ids(history) == set()
