"""What L3 reads: each agent's most recently updated sessions, their last messages, each clipped, and the
per-agent state (`memory/.l3_state.json`): the watermark of the last run, and for each file whose rewrite
failed the older watermark it still needs, so only that file's material is offered again."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import structlog

from agenthub import jsonsafe
from agenthub.agent.definition import AgentDefinition
from agenthub.errors import InvalidIdError
from agenthub.memory.cut import is_turn_start
from agenthub.memory.files import MULTI_USER_CHANNELS, MemoryFiles, Visibility, chat_visibility
from agenthub.memory.host import MemoryHost
from agenthub.memory.summary import render_content
from agenthub.session_keys import SessionKey
from agenthub.storage.memory_files import MemoryName

log = structlog.get_logger(__name__)

Message = dict[str, Any]


@dataclass(frozen=True)
class SessionMaterial:
    key: SessionKey
    messages: list[Message]
    changed_at: float = math.inf
    """When the session's history last changed (`inf`: new material by definition, e.g. for a memory flush)."""


@dataclass
class L3State:
    """`last_run`: the start of the agent's last run; `retry`: file (its `MemoryFiles.label`) → the older watermark
    a file whose rewrite failed (or was refused) still needs."""

    last_run: float = 0.0
    retry: dict[str, float] = field(default_factory=dict)

    def watermark(self, label: str) -> float:
        """Material newer than this is new for the file `label`."""
        return self.retry.get(label, self.last_run)

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
        return max((s.changed_at for s in self.sessions), default=0.0)


@dataclass(frozen=True)
class Batch:
    """The material for one file, and when the newest history it comes from changed."""

    text: str
    newest: float


async def load_state(files: MemoryFiles, agent: AgentDefinition) -> L3State:
    raw = await files.read(files.l3_state_name(agent))
    try:
        data = jsonsafe.loads(raw) if raw else {}
        retry = {str(k): float(v) for k, v in dict(data.get("retry", {})).items()}
        return L3State(float(data.get("last_run", 0.0)), retry)
    except (ValueError, TypeError, AttributeError):
        log.warning("l3_state_unreadable", agent=agent.name)
        return L3State()


async def save_state(files: MemoryFiles, agent: AgentDefinition, state: L3State) -> None:
    text = json.dumps({"last_run": state.last_run, "retry": state.retry})
    await files.store.write(files.l3_state_name(agent), text)


async def collect(host: MemoryHost, agent: AgentDefinition) -> AgentMaterial:
    """The `l3_sessions` sessions of `agent` whose history changed last, each with its last `l3_messages`
    messages, or none when no session changed since the oldest watermark."""
    memory = host.settings.memory
    recent = (await host.history.activity(agent.name))[: memory.l3_sessions]
    state = await load_state(host.memory_files, agent)
    if not any(a.changed_at > state.since for a in recent):
        return AgentMaterial(agent, [], memory.l3_message_chars, state)
    sessions = []
    for active in recent:
        messages = await host.history.load(active.key)
        host.release(active.key)
        sessions.append(SessionMaterial(active.key, messages[-memory.l3_messages :], active.changed_at))
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
    return Batch("\n\n".join(render_session(s, clip) for s in sessions), max(s.changed_at for s in sessions))


def memory_batches(files: MemoryFiles, item: AgentMaterial) -> dict[MemoryName, Batch]:
    """The MEMORY file(s) to rewrite, each only from the chats that read it (`MemoryFiles.memory_name`): the
    agent-wide one from agent-scoped chats, a chat's own from that chat alone."""
    by_name: dict[MemoryName, list[SessionMaterial]] = {}
    for session in item.sessions:
        by_name.setdefault(files.memory_name(item.agent, session.key), []).append(session)
    return {name: _batch(sessions, item.clip) for name, sessions in by_name.items()}


def shared_profile_sessions(files: MemoryFiles, item: AgentMaterial) -> list[SessionMaterial]:
    """The chats that feed the shared `auth/USER.md`: agent-scoped ones with the shared profile (under `auto`
    the single-user channels only; chat-scoped chats never feed it)."""
    scope = files.scope_for
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


def user_batches(files: MemoryFiles, item: AgentMaterial) -> dict[MemoryName, Batch]:
    """Per-sender profiles: each sender's own messages (and the replies to them), per profile file, i.e. per
    (person, channel, visibility): a private profile only from private chats, a group profile only from that group."""
    per_file: dict[MemoryName, list[str]] = {}
    newest: dict[MemoryName, float] = {}
    for session in item.sessions:
        if files.scope_for(item.agent, session.key.channel).profile != "per_user":
            continue
        messages = session.messages
        for i, message in enumerate(messages):
            sender = message.get("sender_id")
            visibility = _message_visibility(session, message)
            if not is_turn_start(message) or not isinstance(sender, str) or not sender or visibility is None:
                continue
            try:
                name = files.person_profile(item.agent, session.key, sender, visibility)
            except InvalidIdError:  # a stored sender id no key accepts: it names no profile, the others go on
                log.warning("l3_sender_refused", agent=item.agent.name, session_key=str(session.key))
                continue
            lines = per_file.setdefault(name, [])
            newest[name] = max(newest.get(name, 0.0), session.changed_at)
            lines.append(_line(message, item.clip))
            reply = messages[i + 1] if i + 1 < len(messages) else None
            if reply is not None and reply.get("role") == "assistant":
                lines.append(_line(reply, item.clip))
    return {name: Batch("\n".join(lines), newest[name]) for name, lines in per_file.items()}
