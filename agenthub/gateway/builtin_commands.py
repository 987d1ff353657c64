"""The built-in commands of design §6: /restart (double-confirm), /stop, /status, /compact, /help; each a small class
given only what it uses, and owning its own state. Features (/forget, /jobs, /usage) bring their own, registered by
the composition root."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

import structlog

from agenthub.clock import Clock
from agenthub.errors import SessionBusyError
from agenthub.gateway.commands import (
    CommandContext,
    CommandHandler,
    CommandRouter,
    CommandTier,
    ConfirmWindow,
    SessionControl,
)
from agenthub.gateway.session_state import SessionRegistry
from agenthub.llm.cache_watch import CacheWatch
from agenthub.llm.tokens import estimate_tokens
from agenthub.messages import ErrorCode
from agenthub.session.history import SessionHistory

if TYPE_CHECKING:
    from agenthub.gateway.core import GatewayCore
    from agenthub.gateway.turn_services import Compactor

log = structlog.get_logger(__name__)


class PluggedCommand(Protocol):
    """A command object as the built-ins and the features' commands are: its name, help key, tier and handler."""

    name: str
    help_key: str
    tier: CommandTier

    async def __call__(self, ctx: CommandContext) -> str: ...


class RestartCommand:
    """/restart: the first asks; the same sender's second within the window aborts the turn and clears the history."""

    name, help_key, tier = "restart", "command.help.restart", CommandTier.PRIORITY

    def __init__(self, control: SessionControl, history: SessionHistory, clock: Clock, window_s: float) -> None:
        self.control, self.history, self.clock = control, history, clock
        self.confirmations = ConfirmWindow(window_s)

    async def __call__(self, ctx: CommandContext) -> str:
        key = ctx.key
        asker = (key, ctx.message.sender_id)  # in a group, only the member who was asked can confirm
        if not self.confirmations.confirm(asker, self.clock()):
            return ctx.text("command.restart.confirm", seconds=int(self.confirmations.window_s))
        self.control.abort(key, ErrorCode.RESTART)
        await self.control.cancel_background(key)  # a compaction in flight is aborted, its model call too
        async with self.control.hold(key):  # the aborted turn has stored what it will; queued turns start after
            await self.control.cancel_background(key)  # one the aborted turn's after-turn hook started meanwhile
            await self.history.clear(key)
        log.info("session_restarted", session_key=str(key))
        return ctx.text("command.restart.done")


def _sentences(ctx: CommandContext, *keys: str, count: int = 0) -> str:
    """Catalogue sentences joined the way the locale writes them (a space in en, nothing in zh-CN)."""
    joiner = "" if ctx.locale == "zh-CN" else " "
    return joiner.join(ctx.text(key, count=count) for key in keys)


class StopCommand:
    """/stop: the sender's running reply and the messages they queued behind it (never another member's)."""

    name, help_key, tier = "stop", "command.help.stop", CommandTier.PRIORITY

    def __init__(self, control: SessionControl) -> None:
        self.control = control

    async def __call__(self, ctx: CommandContext) -> str:
        control, key = self.control, ctx.key
        dropped = control.drop_queued(key, ctx.message.sender_id)
        queued = ("command.stop.dropped",) if dropped else ()
        if control.running_senders(key) - {ctx.message.sender_id}:
            # in a shared (group) session, one member must not cut off another member's answer
            return _sentences(ctx, "command.stop.not_yours", *queued, count=dropped)
        compaction = ("command.stop.compaction_stopped",) if await control.cancel_background(key) else ()
        if control.abort(key, ErrorCode.STOPPED):
            await control.wait_turn_done(key)
            return _sentences(ctx, "command.stop.stopped", *queued, *compaction, "command.stop.kept", count=dropped)
        if compaction:
            return _sentences(ctx, *queued, *compaction, "command.stop.kept_as_was", count=dropped)
        if dropped:
            return _sentences(ctx, *queued, "command.stop.nothing_else", count=dropped)
        return ctx.text("command.stop.nothing")


class StatusCommand:
    """/status: the session's state, queue, size and last model call."""

    name, help_key, tier = "status", "command.help.status", CommandTier.PRIORITY

    def __init__(self, sessions: SessionRegistry, history: SessionHistory, cache: CacheWatch | None = None) -> None:
        self.sessions, self.history, self.cache = sessions, history, cache

    async def __call__(self, ctx: CommandContext) -> str:
        key = ctx.key
        state = self.sessions.get(key)
        status = state.status.value if state is not None else "idle"
        history = await self.history.load(key)
        meta = await self.history.get_meta(key)
        depth = ctx.text("command.status.depth", count=state.depth) if state and state.depth else ""
        lines = [
            ctx.text("command.status.agent", agent=ctx.agent.name),
            ctx.text("command.status.session", session=str(key)),
            ctx.text("command.status.state", state=ctx.text(f"command.status.state.{status}")) + depth,
            ctx.text("command.status.messages", count=len(history), tokens=estimate_tokens(history)),
        ]
        if meta is not None and meta.last_usage:
            usage = meta.last_usage
            last_call = {
                "input": usage.get("input_tokens", 0),
                "cached": usage.get("cache_read_input_tokens", 0),
                "output": usage.get("output_tokens", 0),
            }
            lines.append(ctx.text("command.status.last_call", **last_call))
        hits = self.cache.hit_rate(str(key)) if self.cache is not None else None
        if hits is not None and hits[1] > 0:
            read, prompt = hits
            lines.append(ctx.text("command.status.cache", percent=round(100 * read / prompt), read=read, total=prompt))
        if any(m.get("role") == "system" for m in history):
            lines.append(ctx.text("command.status.summarised"))
        return "\n".join(lines)


class CompactCommand:
    """/compact [focus]: the memory layer's manual compaction, refused while the session is busy."""

    name, help_key, tier = "compact", "command.help.compact", CommandTier.PRIORITY

    def __init__(self, compactor: Compactor | None) -> None:
        self.compactor = compactor  # the gateway's, given at its construction

    async def __call__(self, ctx: CommandContext) -> str:
        compactor = self.compactor
        if compactor is None:
            return ctx.text("command.compact.unavailable")
        try:
            return await compactor.compact(
                ctx.key,
                ctx.agent,
                reason="manual",
                actor=ctx.message.sender_id or "user",
                focus=ctx.args,
                locale=ctx.locale,
            )
        except SessionBusyError:
            return ctx.text("command.compact.busy")


class HelpCommand:
    """/help: one line per registered command."""

    name, help_key, tier = "help", "command.help.help", CommandTier.PRIORITY

    def __init__(self, router: CommandRouter) -> None:
        self.router = router

    async def __call__(self, ctx: CommandContext) -> str:
        return ctx.text("command.help.title") + "\n" + self.router.help_text(ctx.locale)


def register_builtin_commands(gateway: GatewayCore, features: Iterable[PluggedCommand] = ()) -> None:
    """The built-ins, then the `features`' commands, then /help (the order /help lists them in)."""
    session = gateway.settings.session
    builtins: tuple[PluggedCommand, ...] = (
        RestartCommand(gateway, gateway.history, gateway.clock, session.restart_confirm_s),
        StopCommand(gateway),
        StatusCommand(gateway.sessions, gateway.history, gateway.cache_watch),
        CompactCommand(gateway.turn_services.compactor),
        *features,
        HelpCommand(gateway.commands),
    )
    for command in builtins:
        register(gateway.commands, command)


def register(router: CommandRouter, command: PluggedCommand) -> None:
    handler: CommandHandler = command
    router.register(command.name, command.help_key, handler, tier=command.tier)
