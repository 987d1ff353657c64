"""Where MEMORY.md and USER.md live for a session, honouring the per-agent privacy options."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from agenthub.agent.definition import AgentDefinition
from agenthub.session.keys import SessionKey, session_key
from agenthub.storage.atomic import atomic_write_text
from agenthub.storage.paths import AgentLayout, inside


@dataclass(frozen=True)
class MemoryFiles:
    """Resolves memory file paths; `scope="chat"` and `user_profile="per_user"` keep people's facts apart."""

    data_dir: Path
    auth_dir: Path

    def memory_path(self, agent: AgentDefinition, key: SessionKey | None = None) -> Path:
        layout = AgentLayout(self.data_dir, agent.name)
        if agent.config.memory.scope == "chat" and key is not None:
            return inside(layout.memory_dir / "chats", key.file_stem + ".md")
        return layout.memory_file

    def user_path(self, agent: AgentDefinition, sender_id: str | None = None) -> Path:
        if agent.config.memory.user_profile == "per_user" and sender_id:
            stem = session_key(agent.name, "user", sender_id).file_stem
            return inside(self.auth_dir / "users", stem + ".md")
        return self.auth_dir / "USER.md"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


async def read_text(path: Path) -> str:
    """The file's text, or "" when it does not exist."""
    return await asyncio.to_thread(_read, path)


def backup_path(path: Path) -> Path:
    """Where the previous version of a rewritten memory file is kept (one generation): `<file>.bak`."""
    return path.with_name(path.name + ".bak")


async def write_text(path: Path, text: str) -> None:
    """Atomic, durable replace."""
    await asyncio.to_thread(atomic_write_text, path, text)
