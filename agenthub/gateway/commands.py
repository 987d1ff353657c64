"""Slash commands: a message is a command only when it is exactly a registered `/word` (plus arguments)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from agenthub import i18n
from agenthub.agent.definition import AgentDefinition
from agenthub.gateway.handle import ReplyHandle
from agenthub.messages import DoneEvent, ErrorCode, ErrorEvent, InboundMessage
from agenthub.storage.keys import SessionKey

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
    locale: i18n.Locale = "en"
    """The chat's locale: a handler writes its reply with `self.text(key, …)`, which uses it."""

    def text(self, key: str, **params: object) -> str:
        """The catalogue text `key` in this chat's locale."""
        return i18n.text(key, self.locale, **params)


CommandHandler = Callable[[CommandContext], Awaitable[str]]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    """The catalogue key of the command's help line."""
    handler: CommandHandler


class CommandRouter:
    """Maps `/name` to a handler; unknown `/x` is not a command and goes to the model as text."""

    def __init__(self) -> None:
        self._commands: dict[str, Command] = {}

    def register(self, name: str, help_key: str, handler: CommandHandler) -> None:
        """`help_key` is a catalogue key (its text is the line `/help` shows, in the chat's locale)."""
        if help_key not in i18n.TEXTS:
            raise i18n.UnknownTextError(help_key)
        self._commands[name] = Command(name, help_key, handler)

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
            handle.emit(ErrorEvent(ctx.text("command.failed", command=command.name), code=ErrorCode.INTERNAL))
            return
        handle.emit(DoneEvent(text, session_key=str(ctx.key)))

    def help_text(self, locale: str) -> str:
        return "\n".join(f"/{c.name} — {i18n.text(c.help, locale)}" for c in self._commands.values())
