"""Helpers shared by the memory-layer tests (no tests here): seeding histories and telling summary calls apart."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agenthub.agent.definition import AgentDefinition
from agenthub.config import Settings
from agenthub.gateway.core import GatewayCore
from agenthub.hosting.app import Services, build_services, open_stores
from agenthub.messages import InboundMessage
from agenthub.session_keys import SessionKey
from agenthub.storage.memory_files import MemoryName
from tests.support.fakes.anthropic import ScriptedReply, reply_text


def system_text(body: dict[str, Any]) -> str:
    system = body.get("system") or []
    if isinstance(system, str):
        return system
    return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))


def is_summary_request(body: dict[str, Any]) -> bool:
    return "conversation summariser" in system_text(body)


def is_l3_request(body: dict[str, Any]) -> bool:
    text = system_text(body)
    return "You maintain MEMORY.md" in text or "You maintain USER.md" in text


def summaries_then_default(summary: str = "用户在做项目 X；决定用 PostgreSQL；未完成：部署。") -> Any:
    """A responder: summary requests get `summary`, anything else falls through to the default reply."""

    def respond(body: dict[str, Any]) -> ScriptedReply | None:
        return reply_text(summary) if is_summary_request(body) else None

    return respond


def msg(content: str, *, chat: str = "c1", sender: str = "u1", agent: str | None = None) -> InboundMessage:
    return InboundMessage("cli", chat, sender, content, agent=agent)


async def seed(gateway: GatewayCore, key: SessionKey, pairs: int, *, start: int = 0) -> None:
    """Append `pairs` user/assistant exchanges (plain text) to the session."""
    records: list[dict[str, Any]] = []
    for i in range(start, start + pairs):
        records.append({"role": "user", "content": f"question {i}", "timestamp": 1_700_000_000_000 + i})
        records.append({"role": "assistant", "content": f"answer {i}", "timestamp": 1_700_000_000_500 + i})
    await gateway.history.append(key, *records)


async def settle(gateway: GatewayCore, key: SessionKey) -> None:
    """Wait until the session's runner (turns and after-turn hooks) and its background compaction have finished."""
    runner = gateway.sessions.get(key)
    if runner is not None and runner.task is not None:
        with contextlib.suppress(asyncio.CancelledError):
            await runner.task
    background = gateway.background(key)
    if background is not None:
        await asyncio.wait([background])


def conversation(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The non-summary messages."""
    return [m for m in messages if m.get("role") != "system"]


def l3_material(body: dict[str, Any]) -> str:
    text = str(body["messages"][0]["content"])
    found = re.search(r"<recent-conversations>\n(.*)\n</recent-conversations>", text, re.S)
    return found.group(1) if found else ""


def echo_l3(body: dict[str, Any]) -> ScriptedReply | None:
    """L3 (and flush) rewrites copy the material they were given into the file, so any leak propagates."""
    if is_summary_request(body):
        return reply_text("short summary")
    return reply_text("# notes\n" + l3_material(body)) if is_l3_request(body) else None


def memory_file(gateway: GatewayCore, name: MemoryName) -> Path:
    """Where the files backend keeps `name` (design §4); the test's gateway must keep its memory as files."""
    path = gateway.memory_files.file_of(name)
    assert path is not None, "this gateway keeps its memory files in the database"
    return path


def chat_memory_file(gateway: GatewayCore, agent: AgentDefinition, key: SessionKey | None = None) -> Path:
    """The MEMORY.md file the chat `key` reads (the agent-wide one when None)."""
    return memory_file(gateway, gateway.memory_files.memory_name(agent, key))


def backup_of(path: Path) -> Path:
    """Where design §4's files keep the previous generation of a rewritten memory file: `<file>.bak`."""
    return path.with_name(path.name + ".bak")


@contextlib.asynccontextmanager
async def gateway_on(settings: Settings) -> AsyncIterator[GatewayCore]:
    """A gateway on the stores `settings` names (its own pool on PostgreSQL), as `agenthub serve` builds it."""
    async with services_on(settings) as services:
        yield services.gateway


@contextlib.asynccontextmanager
async def services_on(settings: Settings) -> AsyncIterator[Services]:
    """`gateway_on`'s gateway with the features built around it (the scheduler, the memory layer)."""
    stores = await open_stores(settings)
    try:
        async with build_services(settings, stores=stores) as services:
            yield services
    finally:
        await stores.aclose()
