"""Slash commands: a message is a command only when it is exactly a registered `/word` (plus arguments)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agenthub.agent.definition import AgentDefinition
from agenthub.messages import InboundMessage
from agenthub.session.keys import SessionKey

if TYPE_CHECKING:
    from agenthub.gateway.core import GatewayCore

_COMMAND = re.compile(r"^/([A-Za-z][A-Za-z0-9_-]*)(?:\s+(.*))?$", re.DOTALL)


@dataclass(frozen=True)
class CommandContext:
    gateway: GatewayCore
    key: SessionKey
    agent: AgentDefinition
    message: InboundMessage
    args: str


CommandHandler = Callable[[CommandContext], Awaitable[str]]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    handler: CommandHandler


class CommandRouter:
    """Maps `/name` to a handler; unknown `/x` is not a command and goes to the model as text."""

    def __init__(self) -> None:
        self._commands: dict[str, Command] = {}

    def register(self, name: str, help_text: str, handler: CommandHandler) -> None:
        self._commands[name] = Command(name, help_text, handler)

    def match(self, content: str) -> tuple[Command, str] | None:
        found = _COMMAND.match(content.strip())
        if found is None:
            return None
        command = self._commands.get(found.group(1).lower())
        return None if command is None else (command, (found.group(2) or "").strip())

    def help_text(self) -> str:
        return "\n".join(f"/{c.name} — {c.help}" for c in self._commands.values())
