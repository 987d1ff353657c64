"""What L3 reads: each agent's most recently updated sessions, their last messages, each clipped, and the
per-agent watermark (`memory/.l3_state.json`) that says which sessions changed since the last good run."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from agenthub.agent.definition import AgentDefinition
from agenthub.memory.cut import is_turn_start
from agenthub.memory.files import read_text, write_text
from agenthub.memory.summary import render_content
from agenthub.session.keys import SessionKey, key_from_file_stem

if TYPE_CHECKING:
    from agenthub.gateway.core import GatewayCore

log = structlog.get_logger(__name__)

Message = dict[str, Any]
STATE_FILE = ".l3_state.json"


@dataclass(frozen=True)
class SessionMaterial:
    key: SessionKey
    messages: list[Message]
    changed: bool


@dataclass(frozen=True)
class AgentMaterial:
    agent: AgentDefinition
    sessions: list[SessionMaterial]  # empty when nothing changed since the last good run
    clip: int


def recent_histories(sessions_dir: Path, limit: int) -> list[tuple[str, float]]:
    """(stem, mtime) of the `limit` most recently modified `*.jsonl` histories, newest first."""
    if not sessions_dir.is_dir():
        return []
    found = []
    for path in sessions_dir.iterdir():
        if path.name.endswith(".jsonl") and path.is_file():
            try:
                found.append((path.name[: -len(".jsonl")], path.stat().st_mtime))
            except FileNotFoundError:
                continue
    found.sort(key=lambda item: item[1], reverse=True)
    return found[:limit]


def _state_path(gw: GatewayCore, agent: AgentDefinition) -> Path:
    return gw.history.layout(agent.name).memory_dir / STATE_FILE


async def watermark(gw: GatewayCore, agent: AgentDefinition) -> float:
    raw = await read_text(_state_path(gw, agent))
    try:
        value = json.loads(raw).get("last_run", 0.0) if raw else 0.0
        return float(value)
    except (ValueError, TypeError, AttributeError):
        log.warning("l3_state_unreadable", agent=agent.name)
        return 0.0


async def mark_done(gw: GatewayCore, agent: AgentDefinition, started: float) -> None:
    """Advance the watermark to the start of a run that fully succeeded."""
    await write_text(_state_path(gw, agent), json.dumps({"last_run": started}))


async def collect(gw: GatewayCore, agent: AgentDefinition) -> AgentMaterial:
    memory = gw.settings.memory
    sessions_dir = gw.history.layout(agent.name).sessions_dir
    files = await asyncio.to_thread(recent_histories, sessions_dir, memory.l3_sessions)
    since = await watermark(gw, agent)
    if not any(mtime > since for _, mtime in files):
        return AgentMaterial(agent, [], memory.l3_message_chars)
    sessions = []
    for stem, mtime in files:
        key = key_from_file_stem(stem)
        if key is None or key.agent != agent.name:
            continue
        messages = await gw.history.load(key)
        if gw.sessions.get(key) is None and not gw.is_busy(key):
            gw.history.evict(key)
        sessions.append(SessionMaterial(key, messages[-memory.l3_messages :], mtime > since))
    return AgentMaterial(agent, sessions, memory.l3_message_chars)


def _line(message: Message, clip: int) -> str:
    text = " ".join(render_content(message.get("content"), text_chars=clip, tool_chars=clip).split())
    text = text if len(text) <= clip else text[: clip - 1] + "…"
    role = "summary" if message.get("role") == "system" else message.get("role", "?")
    return f"{role}: {text}"


def render_session(session: SessionMaterial, clip: int) -> str:
    lines = [_line(m, clip) for m in session.messages]
    return f"## chat {session.key.channel}/{session.key.chat_id}\n" + "\n".join(lines)


def render_all(item: AgentMaterial) -> str:
    return "\n\n".join(render_session(s, item.clip) for s in item.sessions)


def memory_batches(gw: GatewayCore, item: AgentMaterial) -> dict[Path, str]:
    """The MEMORY file(s) to rewrite: one per agent, or one per changed chat with `scope = "chat"`."""
    files = gw.memory_files
    if item.agent.config.memory.scope == "chat":
        return {files.memory_path(item.agent, s.key): render_session(s, item.clip) for s in item.sessions if s.changed}
    return {files.memory_path(item.agent): render_all(item)}


def user_batches(gw: GatewayCore, item: AgentMaterial) -> dict[Path, str]:
    """With `user_profile = "per_user"`: each sender's own messages (and the replies to them), per profile."""
    per_sender: dict[str, list[str]] = {}
    for session in item.sessions:
        messages = session.messages
        for i, message in enumerate(messages):
            sender = message.get("sender_id")
            if not is_turn_start(message) or not isinstance(sender, str) or not sender:
                continue
            lines = per_sender.setdefault(sender, [])
            lines.append(_line(message, item.clip))
            reply = messages[i + 1] if i + 1 < len(messages) else None
            if reply is not None and reply.get("role") == "assistant":
                lines.append(_line(reply, item.clip))
    return {gw.memory_files.user_path(item.agent, sender): "\n".join(lines) for sender, lines in per_sender.items()}
