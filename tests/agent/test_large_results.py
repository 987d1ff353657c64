"""Large tool results are moved to workspace/<agent>/large_tool_results/, and read_file reads them back in pages."""

from __future__ import annotations

import asyncio
import hashlib
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from agenthub.agent.definition import AgentConfig, AgentDefinition
from agenthub.agent.large_results import PREVIEW_CHARS, LargeResultStore
from agenthub.agent.tools import BUILTIN_TOOLS, MAX_FILE_BYTES, ToolContext, ToolError
from agenthub.config import Settings
from agenthub.hosting.app import build_gateway
from agenthub.memory.files import MemoryFiles
from agenthub.messages import DoneEvent, InboundMessage
from agenthub.session_keys import SessionKey
from tests.support.agents import write_agent
from tests.support.fakes.anthropic import FakeAnthropic, ScriptedReply, reply_text, reply_tool
from tests.support.fakes.mcp_server import big
from tests.support.paths import MCP_SERVER_SCRIPT

SERVER_SCRIPT = MCP_SERVER_SCRIPT
STORED = re.compile(r"stored in full in your workspace at (large_tool_results/[^/ ]+/[0-9a-f]{64}\.txt)")
DIRECT = SessionKey("default", "cli", "direct")
NEXT_PAGE = re.compile(r"\n\[read_file: more follows; the next page starts at offset (\d+)\]$")


def _tool_context(workspace: Path, tmp_path: Path, key: SessionKey = DIRECT) -> ToolContext:
    agent = AgentDefinition("default", AgentConfig(tools=["read_file", "list_dir"]), "persona")
    memory = MemoryFiles(tmp_path / "data", tmp_path / "auth")
    return ToolContext(agent, key, "me", memory, workspace)


def _last_result(body: dict[str, Any]) -> dict[str, Any] | None:
    content = body["messages"][-1]["content"]
    results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    return results[0] if results else None


def _read_pages_then_answer(body: dict[str, Any]) -> ScriptedReply:
    """The model asks for the big result, then pages through the stored file with read_file until it ends."""
    result = _last_result(body)
    if result is None:
        return reply_tool("srv__big", {"chars": 200_000})
    text = str(result["content"])
    if stored := STORED.search(text):
        return reply_tool("read_file", {"path": stored.group(1), "limit": 90_000})
    if following := NEXT_PAGE.search(text):
        return reply_tool("read_file", {"path": _read_path(body), "offset": int(following.group(1)), "limit": 90_000})
    return reply_text("read it all")


def _read_path(body: dict[str, Any]) -> str:
    for message in reversed(body["messages"]):
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block.get("type") == "tool_use" and block["name"] == "read_file":
                return str(block["input"]["path"])
    raise AssertionError("no read_file call yet")


async def test_a_200k_tool_result_is_stored_previewed_and_read_back_in_pages(
    settings: Settings, fake_llm: FakeAnthropic
) -> None:
    server = {"command": sys.executable, "args": [str(SERVER_SCRIPT)]}
    write_agent(
        settings.agents_dir,
        "default",
        {"tools": ["srv__*", "read_file"], "mcp": {"srv": server}, "mcp_start_wait_s": 60},
    )
    fake_llm.responder = _read_pages_then_answer
    full = big(200_000)
    async with build_gateway(settings) as gw:
        handle = await gw.submit(InboundMessage("cli", "direct", "me", "fetch the big thing"))
        events = [e async for e in handle]
        history = await gw.history.load(SessionKey("default", "cli", "direct"))
    assert isinstance(events[-1], DoneEvent) and events[-1].full_text == "read it all"

    digest = hashlib.sha256(full.encode("utf-8")).hexdigest()
    stored = settings.workspace_dir / "default" / "large_tool_results" / "cli_direct" / f"{digest}.txt"
    assert stored.read_text(encoding="utf-8") == full

    results = [b for m in history if isinstance(m["content"], list) for b in m["content"] if b["type"] == "tool_result"]
    kept = results[0]["content"]
    assert len(kept) < 2 * PREVIEW_CHARS + 600
    assert f"large_tool_results/cli_direct/{digest}.txt" in kept and kept.startswith(
        "[This result has 200000 characters"
    )
    assert full[:PREVIEW_CHARS] in kept and kept.endswith(full[-PREVIEW_CHARS:])

    pages = [str(r["content"]) for r in results[1:]]
    assert len(pages) == 3 and all(not r.get("is_error") for r in results)
    assert len(pages[0]) > 80_000  # over the threshold, yet read_file's pages are never moved again
    assert "".join(NEXT_PAGE.sub("", page) for page in pages) == full


async def test_results_move_only_when_over_the_threshold_and_never_for_read_file(tmp_path: Path) -> None:
    store = LargeResultStore(tmp_path / "ws", threshold_chars=10_000, key=DIRECT)
    exactly = "a" * 10_000
    assert await store.keep("srv__x", exactly) == exactly
    over = "b" * 10_001
    kept = await store.keep("srv__x", over)
    assert kept != over and STORED.search(kept)
    assert "read it with read_file" in kept
    assert await store.keep("read_file", over) == over
    assert await store.keep("memory_search", over) == over
    assert len(list((tmp_path / "ws" / "large_tool_results" / "cli_direct").iterdir())) == 1


async def test_without_read_file_the_preview_says_only_it_is_available(tmp_path: Path) -> None:
    store = LargeResultStore(tmp_path / "ws", threshold_chars=10_000, key=DIRECT, readable=False)
    kept = await store.keep("srv__x", "c" * 20_000)
    assert STORED.search(kept) and "read_file is not enabled for you" in kept and "read it with" not in kept


async def test_many_turns_storing_the_same_result_at_once_all_succeed(tmp_path: Path) -> None:
    store = LargeResultStore(tmp_path / "ws", threshold_chars=10_000, key=DIRECT)
    text = big(3_000_000)
    kept = await asyncio.gather(*(store.keep(f"t{i}", text) for i in range(16)))
    assert len(set(kept)) == 1 and STORED.search(kept[0])
    [stored] = (tmp_path / "ws" / "large_tool_results" / "cli_direct").iterdir()
    assert stored.read_text(encoding="utf-8") == text


async def test_read_file_pages_count_characters_and_lift_the_size_limit(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    text = ("汉字与ascii混合的一行\n" * 20_000)[:MAX_FILE_BYTES]  # well over MAX_FILE_BYTES bytes in UTF-8
    (workspace / "big.txt").write_text(text, encoding="utf-8")
    ctx = _tool_context(workspace, tmp_path)
    read_file = BUILTIN_TOOLS["read_file"]
    with pytest.raises(ToolError, match="read it in pages"):
        await read_file.run({"path": "big.txt"}, ctx)
    first = await read_file.run({"path": "big.txt", "limit": 7}, ctx)
    assert first == text[:7] + "\n[read_file: more follows; the next page starts at offset 7]"
    assert await read_file.run({"path": "big.txt", "offset": len(text) - 5}, ctx) == text[-5:]
    assert "nothing at offset" in await read_file.run({"path": "big.txt", "offset": len(text) + 1}, ctx)
    with pytest.raises(ToolError, match="'limit' must be a whole number"):
        await read_file.run({"path": "big.txt", "limit": 0}, ctx)
    with pytest.raises(ToolError, match="outside this agent's workspace"):
        await read_file.run({"path": "../elsewhere.txt", "offset": 0}, ctx)


async def test_a_large_result_is_kept_per_chat_and_another_chat_can_neither_read_nor_list_it(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    alice = SessionKey("default", "wecom", "alice")
    kept = await LargeResultStore(workspace, threshold_chars=10_000, key=alice).keep("srv__x", "工资单 " * 5000)
    stored = STORED.search(kept)
    assert stored and stored.group(1).startswith("large_tool_results/wecom_alice/")
    own, other = _tool_context(workspace, tmp_path, alice), _tool_context(workspace, tmp_path)
    read_file, list_dir = BUILTIN_TOOLS["read_file"], BUILTIN_TOOLS["list_dir"]
    assert (await read_file.run({"path": stored.group(1), "limit": 3}, own)).startswith("工资单")
    for tool, path in [
        (read_file, stored.group(1)),
        (list_dir, "large_tool_results"),  # its listing would name every chat
        (list_dir, "large_tool_results/wecom_alice"),
        (list_dir, "./large_tool_results/../large_tool_results/wecom_alice"),
    ]:
        with pytest.raises(ToolError, match="another chat's"):
            await tool.run({"path": path}, other)
