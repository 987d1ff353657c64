"""The per-session memo of `ContextBuilder`: a turn converts only what was appended, and the requests it builds are
byte-identical to the uncached path over random growing histories (images, tool pairs, summaries, interruptions)."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

from agenthub.agent.context import ContextBudget, ContextBuilder
from agenthub.agent.conversion import cut_old_tool_results, images_to_send, mark_newest_message, to_api_messages
from agenthub.agent.definition import AgentConfig, AgentDefinition
from agenthub.memory.files import MemoryFiles
from agenthub.session.history import SessionHistory
from agenthub.session_keys import SessionKey, session_key

Message = dict[str, Any]
KEY = session_key("default", "cli", "memo")
AGENT = AgentDefinition("default", AgentConfig(), "persona")
CUT_LIMIT = 40
IMAGES_ON_DISK = ("media/a.png", "media/b.png")


def _builder(tmp_path: Path) -> ContextBuilder:
    workspace = tmp_path / "workspace"
    for name in IMAGES_ON_DISK:
        (workspace / AGENT.name / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / AGENT.name / name).write_bytes(name.encode() * 3)
    memory = MemoryFiles(tmp_path / "data", tmp_path / "auth")
    return ContextBuilder(memory, ContextBudget(old_tool_result_chars=CUT_LIMIT), workspace_dir=workspace)


async def _request_messages(builder: ContextBuilder, key: SessionKey, history: list[Message]) -> list[Message]:
    request = await builder.build(
        agent=AGENT, key=key, sender_id="me", history=history, tools=[], model="m", max_tokens=100
    )
    return request.messages


async def _uncached(builder: ContextBuilder, history: list[Message]) -> list[Message]:
    refs = images_to_send(history)
    images = await builder.images.load(builder.workspace_dir / AGENT.name, refs) if refs else None
    return mark_newest_message(cut_old_tool_results(to_api_messages(history, images), CUT_LIMIT))


def _user(rng: random.Random, n: int) -> Message:
    message: Message = {"role": "user", "content": f"user {n} " + "x" * rng.randrange(60), "timestamp": 1_000 * n}
    if rng.random() < 0.3:
        message["channel"] = "cli"
    if rng.random() < 0.2:
        message["together"] = True
    if rng.random() < 0.3:
        path = rng.choice([*IMAGES_ON_DISK, "media/gone.png"])
        image = {"type": "image", "source": {"type": "agenthub_file", "path": path, "media_type": "image/png"}}
        message["content"] = [{"type": "text", "text": message["content"]}, image]
    return message


def _tool_pair(rng: random.Random, n: int) -> list[Message]:
    use = {"type": "tool_use", "id": f"t{n}", "name": "x", "input": {}}
    result = {"type": "tool_result", "tool_use_id": rng.choice([f"t{n}", "stray"]), "content": "r" * 90}
    pair = [{"role": "assistant", "content": [{"type": "text", "text": "calling"}, use]}]
    if rng.random() < 0.8:  # else the tool_use is left without its result (an interrupted tool loop)
        pair.append({"role": "user", "content": [result]})
    return pair


def _some_messages(rng: random.Random, n: int) -> list[Message]:
    kind = rng.random()
    if kind < 0.35:
        return [_user(rng, n), {"role": "assistant", "content": f"answer {n}"}]
    if kind < 0.5:
        return [_user(rng, n)]  # a turn without a reply
    if kind < 0.7:
        return [_user(rng, n), *_tool_pair(rng, n), {"role": "assistant", "content": "done"}]
    if kind < 0.8:
        return [{"role": "assistant", "content": rng.choice(["", "more", "refused"]), "refusal": rng.random() < 0.5}]
    if kind < 0.9:
        return [{"role": "system", "content": f"{n} summary"}]
    return [_user(rng, n), {"role": "assistant", "content": [{"type": "text", "text": f"blocks {n}"}]}]


def _next_history(rng: random.Random, history: list[Message], n: int) -> list[Message]:
    """What the next turn loads: mostly the history with messages appended, sometimes a compaction (a summary and
    the same tail objects), a redaction (equal copies) or a clear."""
    change = rng.random()
    if change < 0.05:
        return []
    if change < 0.1:
        return [{"role": "system", "content": f"summary {n}"}, *history[-rng.randrange(1, 8) :]]
    if change < 0.15:
        return copy.deepcopy(history)
    return [*history, *_some_messages(rng, n)]


async def test_requests_with_the_memo_are_byte_identical_to_the_uncached_path(tmp_path: Path) -> None:
    builder = _builder(tmp_path)
    for seed in range(12):
        rng = random.Random(seed)
        key, history = session_key("default", "cli", f"s{seed}"), list[Message]()
        for n in range(120):
            history = _next_history(rng, history, n)
            if not history:
                continue
            cached = await _request_messages(builder, key, history)
            expected = await _uncached(builder, history)
            assert json.dumps(cached, ensure_ascii=False) == json.dumps(expected, ensure_ascii=False), (seed, n)


async def test_a_turn_converts_only_what_was_appended(tmp_path: Path) -> None:
    builder = _builder(tmp_path)
    rng = random.Random(7)
    history: list[Message] = []
    for n in range(300):  # turns that were answered, some with images and tool calls
        user = _user(rng, n)
        user.pop("together", None)
        use = {"type": "tool_use", "id": f"t{n}", "name": "x", "input": {}}
        result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": "r" * 90}
        tools = [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}] if n % 3 else []
        history += [user, *tools, {"role": "assistant", "content": f"answer {n}"}]
    history[3:3] = [  # early on: an interrupted turn, messages sent together, two assistant messages, an orphan
        {"role": "user", "content": "interrupted"},
        {"role": "user", "content": "then this"},
        {"role": "user", "content": "and this", "together": True},
        {"role": "assistant", "content": "one"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "lost", "name": "x", "input": {}}]},
    ]
    await _request_messages(builder, KEY, history)
    first = builder.last_computed
    history = [*history, {"role": "user", "content": "one more"}]
    await _request_messages(builder, KEY, history)
    assert first > 300
    # the new message and the last turn's few messages (converted again as they settle), through each per-message step
    assert builder.last_computed <= 40


async def test_a_replaced_history_is_converted_afresh(tmp_path: Path) -> None:
    builder = _builder(tmp_path)
    history: list[Message] = [{"role": "user", "content": "old"}, {"role": "assistant", "content": "reply"}]
    await _request_messages(builder, KEY, history)
    redacted = [{"role": "user", "content": "[redacted]"}, {"role": "assistant", "content": "reply"}]
    messages = await _request_messages(builder, KEY, redacted)
    assert "old" not in json.dumps(messages) and "[redacted]" in json.dumps(messages)


async def test_a_replace_or_clear_of_the_stored_history_drops_the_sessions_memo(tmp_path: Path) -> None:
    builder, history = _builder(tmp_path), SessionHistory(tmp_path / "data", fsync=False)
    history.observers.append(builder.history_changed)
    await history.append(KEY, *({"role": "user", "content": f"secret {n}"} for n in range(50)))
    await _request_messages(builder, KEY, await history.load(KEY))
    await _request_messages(builder, KEY, await history.load(KEY))
    assert builder.last_computed == 0
    await history.replace(KEY, await history.load(KEY))  # the same messages: only the memo tells them apart
    await _request_messages(builder, KEY, await history.load(KEY))
    assert builder.last_computed >= 50
    await history.clear(KEY)
    await history.append(KEY, {"role": "user", "content": "after"})
    await _request_messages(builder, KEY, await history.load(KEY))
    assert builder.last_computed < 10
