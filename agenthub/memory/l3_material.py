"""What L3 reads: each agent's most recently updated sessions, their last messages, each clipped, and the
per-agent state (`memory/.l3_state.json`): the watermark of the last run, and for each file whose rewrite
failed the older watermark it still needs, so only that file's material is offered again."""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from agenthub import jsonsafe
from agenthub.agent.definition import AgentDefinition
from agenthub.errors import StorageError
from agenthub.memory.cut import is_turn_start
from agenthub.memory.files import MULTI_USER_CHANNELS, Visibility, chat_visibility, read_text, write_text
from agenthub.memory.summary import render_content
from agenthub.storage.keys import SessionKey, key_from_file_stem

if TYPE_CHECKING:
    from agenthub.gateway.core import GatewayCore

log = structlog.get_logger(__name__)

Message = dict[str, Any]
STATE_FILE = ".l3_state.json"


@dataclass(frozen=True)
class SessionMaterial:
    key: SessionKey
    messages: list[Message]
    mtime: float = math.inf
    """When the history file last changed (`inf`: new material by definition, e.g. for a memory flush)."""


@dataclass
class L3State:
    """`last_run`: the start of the agent's last run; `retry`: file → the older watermark a file whose rewrite
    failed (or was refused) still needs."""

    last_run: float = 0.0
    retry: dict[str, float] = field(default_factory=dict)

    def watermark(self, path: Path) -> float:
        """Material newer than this is new for `path`."""
        return self.retry.get(str(path), self.last_run)

    @property
    def since(self) -> float:
        """The oldest watermark of any file: sessions older than it are new for none."""
        return min([self.last_run, *self.retry.values()])


@dataclass(frozen=True)
class AgentMaterial:
    agent: AgentDefinition
    sessions: list[SessionMaterial]  # empty when nothing changed since the oldest watermark
    clip: int
    state: L3State = field(default_factory=L3State)

    @property
    def newest(self) -> float:
        return max((s.mtime for s in self.sessions), default=0.0)


@dataclass(frozen=True)
class Batch:
    """The material for one file, and when the newest history it comes from changed."""

    text: str
    newest: float


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


async def load_state(gw: GatewayCore, agent: AgentDefinition) -> L3State:
    raw = await read_text(_state_path(gw, agent))
    try:
        data = jsonsafe.loads(raw) if raw else {}
        retry = {str(k): float(v) for k, v in dict(data.get("retry", {})).items()}
        return L3State(float(data.get("last_run", 0.0)), retry)
    except (ValueError, TypeError, AttributeError):
        log.warning("l3_state_unreadable", agent=agent.name)
        return L3State()


async def save_state(gw: GatewayCore, agent: AgentDefinition, state: L3State) -> None:
    await write_text(_state_path(gw, agent), json.dumps({"last_run": state.last_run, "retry": state.retry}))


async def collect(gw: GatewayCore, agent: AgentDefinition) -> AgentMaterial:
    memory = gw.settings.memory
    sessions_dir = gw.history.layout(agent.name).sessions_dir
    files = await asyncio.to_thread(recent_histories, sessions_dir, memory.l3_sessions)
    state = await load_state(gw, agent)
    if not any(mtime > state.since for _, mtime in files):
        return AgentMaterial(agent, [], memory.l3_message_chars, state)
    sessions = []
    for stem, mtime in files:
        key = key_from_file_stem(stem)
        if key is None or key.agent != agent.name:
            continue
        messages = await gw.history.load(key)
        if gw.sessions.get(key) is None and not gw.is_busy(key):
            gw.history.evict(key)
        sessions.append(SessionMaterial(key, messages[-memory.l3_messages :], mtime))
    return AgentMaterial(agent, sessions, memory.l3_message_chars, state)


def _line(message: Message, clip: int) -> str:
    text = " ".join(render_content(message.get("content"), text_chars=clip, tool_chars=clip).split())
    text = text if len(text) <= clip else text[: clip - 1] + "…"
    role = "summary" if message.get("role") == "system" else message.get("role", "?")
    return f"{role}: {text}"


def render_session(session: SessionMaterial, clip: int) -> str:
    lines = [_line(m, clip) for m in session.messages]
    return f"## chat {session.key.channel}/{session.key.chat_id}\n" + "\n".join(lines)


def _batch(sessions: list[SessionMaterial], clip: int) -> Batch:
    return Batch("\n\n".join(render_session(s, clip) for s in sessions), max(s.mtime for s in sessions))


def memory_batches(gw: GatewayCore, item: AgentMaterial) -> dict[Path, Batch]:
    """The MEMORY file(s) to rewrite, each only from the chats that read it (`MemoryFiles.memory_path`): the
    agent-wide one from agent-scoped chats, a chat's own from that chat alone. A chat whose file path is refused (a
    planted link) is left out, logged: the other chats' files go on."""
    by_path: dict[Path, list[SessionMaterial]] = {}
    for session in item.sessions:
        try:
            path = gw.memory_files.memory_path(item.agent, session.key)
        except StorageError:
            log.warning("l3_memory_path_refused", agent=item.agent.name, session_key=str(session.key))
            continue
        by_path.setdefault(path, []).append(session)
    return {path: _batch(sessions, item.clip) for path, sessions in by_path.items()}


def shared_profile_sessions(gw: GatewayCore, item: AgentMaterial) -> list[SessionMaterial]:
    """The chats that feed the shared `auth/USER.md`: agent-scoped ones with the shared profile (under `auto`
    the single-user channels only; chat-scoped chats never feed it)."""
    scope = gw.memory_files.scope_for
    return [
        s
        for s in item.sessions
        if scope(item.agent, s.key.channel).memory == "agent" and scope(item.agent, s.key.channel).profile == "shared"
    ]


def _message_visibility(session: SessionMaterial, message: Message) -> Visibility | None:
    """Which of the sender's profiles a message may feed; None for a message on a multi-user channel stored
    without a `chat_type` (from before the upgrade): it feeds none, rather than risk a private fact in a group."""
    channel = session.key.channel
    if channel in MULTI_USER_CHANNELS and "chat_type" not in message:
        return None
    return chat_visibility(channel, message.get("chat_type"))


def user_batches(gw: GatewayCore, item: AgentMaterial) -> dict[Path, Batch]:
    """Per-sender profiles: each sender's own messages (and the replies to them), per profile file, i.e. per
    (person, channel, visibility): a private profile only from private chats, a group profile only from that group."""
    per_file: dict[Path, list[str]] = {}
    newest: dict[Path, float] = {}
    for session in item.sessions:
        if gw.memory_files.scope_for(item.agent, session.key.channel).profile != "per_user":
            continue
        messages = session.messages
        for i, message in enumerate(messages):
            sender = message.get("sender_id")
            visibility = _message_visibility(session, message)
            if not is_turn_start(message) or not isinstance(sender, str) or not sender or visibility is None:
                continue
            path = gw.memory_files.person_profile(item.agent, session.key, sender, visibility)
            lines = per_file.setdefault(path, [])
            newest[path] = max(newest.get(path, 0.0), session.mtime)
            lines.append(_line(message, item.clip))
            reply = messages[i + 1] if i + 1 < len(messages) else None
            if reply is not None and reply.get("role") == "assistant":
                lines.append(_line(reply, item.clip))
    return {path: Batch("\n".join(lines), newest[path]) for path, lines in per_file.items()}
