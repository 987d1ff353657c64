"""Slash commands: a message is a command only when it is exactly a registered `/word` (plus arguments).

Each command has a tier: a priority command runs the moment it arrives, outside the session's queue (/stop must
reach a running turn); a queued one waits its place in the queue like a message and runs between turns.
"""

from __future__ import annotations

import asyncio
import enum
import re
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

import structlog

from agenthub import i18n
from agenthub.agent.definition import AgentDefinition
from agenthub.errors import PathRefusedError, StorageError
from agenthub.gateway.handle import ReplyHandle
from agenthub.messages import DoneEvent, ErrorCode, ErrorEvent, InboundMessage
from agenthub.session_keys import SessionKey

log = structlog.get_logger(__name__)

_COMMAND = re.compile(r"^/([A-Za-z][A-Za-z0-9_-]*)(?:\s+(.*))?$", re.DOTALL)


class SessionControl(Protocol):
    """What a command may do to a session: the gateway provides it, and commands get it instead of the gateway."""

    def running_senders(self, key: SessionKey) -> frozenset[str]:
        """Who the turn running in the session answers (empty when none runs)."""
        ...

    def abort(self, key: SessionKey, reason: str = ...) -> bool: ...

    def drop_queued(self, key: SessionKey, sender_id: str, reason: str = ...) -> int: ...

    async def wait_turn_done(self, key: SessionKey) -> None: ...

    async def cancel_background(self, key: SessionKey) -> bool: ...

    def hold(self, key: SessionKey) -> AbstractAsyncContextManager[None]: ...


@dataclass(frozen=True)
class CommandContext:
    control: SessionControl
    """The session's controls (abort, hold, drop what is queued, …), never the whole gateway."""
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


class CommandTier(enum.StrEnum):
    PRIORITY = "priority"
    """Runs at once, beside whatever the session is doing."""
    QUEUED = "queued"
    """Waits in the session's queue behind the messages before it; the messages after it wait for it."""


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    """The catalogue key of the command's help line."""
    handler: CommandHandler
    tier: CommandTier = CommandTier.PRIORITY


@dataclass(frozen=True)
class CommandCall:
    """A queued-tier command waiting in its session's queue, with what it runs with."""

    command: Command
    context: CommandContext


class ConfirmWindow:
    """A double confirmation per (session, sender): the first ask opens a window of `window_s` seconds, a second
    ask by the same sender in the same session inside it confirms. Expired asks are dropped on every call."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._asked: dict[tuple[SessionKey, str], float] = {}

    def __contains__(self, asker: object) -> bool:
        return asker in self._asked

    def __len__(self) -> int:
        return len(self._asked)

    def confirm(self, asker: tuple[SessionKey, str], now: float) -> bool:
        """True when `asker` asked within the window (which closes); otherwise the window opens now."""
        self._asked = {who: at for who, at in self._asked.items() if now - at <= self.window_s}
        if asker in self._asked:
            del self._asked[asker]
            return True
        self._asked[asker] = now
        return False


class CommandRouter:
    """Maps `/name` to a handler; unknown `/x` is not a command and goes to the model as text."""

    def __init__(self) -> None:
        self._commands: dict[str, Command] = {}

    def register(
        self, name: str, help_key: str, handler: CommandHandler, *, tier: CommandTier = CommandTier.PRIORITY
    ) -> None:
        """`help_key` is a catalogue key (its text is the line `/help` shows, in the chat's locale)."""
        if help_key not in i18n.TEXTS:
            raise i18n.UnknownTextError(help_key)
        self._commands[name] = Command(name, help_key, handler, tier)

    def match(self, content: str) -> tuple[Command, str] | None:
        found = _COMMAND.match(content.strip())
        if found is None:
            return None
        command = self._commands.get(found.group(1).lower())
        return None if command is None else (command, (found.group(2) or "").strip())

    async def run(self, command: Command, ctx: CommandContext, handle: ReplyHandle) -> None:
        """Run a command now; its reply is one DoneEvent and nothing goes into history."""
        try:
            text = await command.handler(ctx)
        except asyncio.CancelledError:
            raise
        except PathRefusedError:  # a link planted in the session's files (logged where it was refused)
            log.warning("command_path_refused", command=command.name, session_key=str(ctx.key))
            handle.emit(ErrorEvent(ctx.text("error.path_refused"), code=ErrorCode.PATH_REFUSED))
            return
        except StorageError as e:
            log.warning("command_storage_unavailable", command=command.name, session_key=str(ctx.key), error=str(e))
            handle.emit(ErrorEvent(ctx.text("error.storage_unavailable"), code=ErrorCode.STORAGE_UNAVAILABLE))
            return
        except Exception:
            log.exception("command_failed", command=command.name, session_key=str(ctx.key))
            handle.emit(ErrorEvent(ctx.text("command.failed", command=command.name), code=ErrorCode.INTERNAL))
            return
        handle.emit(DoneEvent(text, session_key=str(ctx.key)))

    def help_text(self, locale: str) -> str:
        return "\n".join(f"/{c.name} — {i18n.text(c.help, locale)}" for c in self._commands.values())
