"""Slash commands: a message is a command only when it is exactly a registered `/word` (plus arguments)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from agenthub.agent.definition import AgentDefinition
from agenthub.gateway.handle import ReplyHandle
from agenthub.messages import DoneEvent, ErrorEvent, InboundMessage
from agenthub.session.keys import SessionKey

if TYPE_CHECKING:
    from agenthub.gateway.core import GatewayCore

log = structlog.get_logger(__name__)

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

    async def run(self, command: Command, ctx: CommandContext, handle: ReplyHandle) -> None:
        """Run a command outside the session queue; its reply is one DoneEvent and nothing goes into history."""
        try:
            text = await command.handler(ctx)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("command_failed", command=command.name, session_key=str(ctx.key))
            handle.emit(ErrorEvent(f"/{command.name} failed; please try again.", code="internal"))
            return
        handle.emit(DoneEvent(text, session_key=str(ctx.key)))

    def help_text(self) -> str:
        return "\n".join(f"/{c.name} — {c.help}" for c in self._commands.values())
