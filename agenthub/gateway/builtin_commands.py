"""The built-in commands of design §6 and §14: /restart and /forget (double-confirm), /stop, /status, /compact,
/help."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from agenthub.errors import SessionBusyError
from agenthub.forget.command import ForgetCommand
from agenthub.gateway.commands import CommandContext
from agenthub.llm.tokens import estimate_tokens
from agenthub.messages import ErrorCode

if TYPE_CHECKING:
    from agenthub.gateway.core import GatewayCore

log = structlog.get_logger(__name__)


async def _restart(ctx: CommandContext) -> str:
    gw, key = ctx.gateway, ctx.key
    pending = gw.restart_pending()
    window = gw.settings.session.restart_confirm_s
    asker = (key, ctx.message.sender_id)  # in a group, only the member who was asked can confirm
    asked_at = pending.get(asker)
    now = gw.clock()
    if asked_at is None or now - asked_at > window:
        pending[asker] = now
        return ctx.text("command.restart.confirm", seconds=int(window))
    del pending[asker]
    gw.abort(key, ErrorCode.RESTART)
    await gw.cancel_background(key)  # a compaction in flight is aborted, its model call too
    async with gw.hold(key):  # the aborted turn has stored what it will; queued turns start after the clear
        await gw.cancel_background(key)  # one the aborted turn's after-turn hook started meanwhile
        await gw.history.clear(key)
    log.info("session_restarted", session_key=str(key))
    return ctx.text("command.restart.done")


def _sentences(ctx: CommandContext, *keys: str, count: int = 0) -> str:
    """Catalogue sentences joined the way the locale writes them (a space in en, nothing in zh-CN)."""
    joiner = "" if ctx.locale == "zh-CN" else " "
    return joiner.join(ctx.text(key, count=count) for key in keys)


async def _stop(ctx: CommandContext) -> str:
    """Stop the sender's running reply and drop the messages they queued behind it (never another member's)."""
    dropped = ctx.gateway.drop_queued(ctx.key, ctx.message.sender_id)
    queued = ("command.stop.dropped",) if dropped else ()
    runner = ctx.gateway.runner(ctx.key)
    running = runner.current if runner is not None else None
    if running is not None and running.senders - {ctx.message.sender_id}:
        # in a shared (group) session, one member must not cut off another member's answer
        return _sentences(ctx, "command.stop.not_yours", *queued, count=dropped)
    compaction = ("command.stop.compaction_stopped",) if await ctx.gateway.cancel_background(ctx.key) else ()
    if ctx.gateway.abort(ctx.key, ErrorCode.STOPPED):
        await ctx.gateway.wait_turn_done(ctx.key)
        return _sentences(ctx, "command.stop.stopped", *queued, *compaction, "command.stop.kept", count=dropped)
    if compaction:
        return _sentences(ctx, *queued, *compaction, "command.stop.kept_as_was", count=dropped)
    if dropped:
        return _sentences(ctx, *queued, "command.stop.nothing_else", count=dropped)
    return ctx.text("command.stop.nothing")


async def _status(ctx: CommandContext) -> str:
    gw, key = ctx.gateway, ctx.key
    session = gw.sessions.get(key)
    state = session.status.value if session is not None else "idle"
    runner = gw.runner(key)
    history = await gw.history.load(key)
    meta = await gw.history.get_meta(key)
    depth = ctx.text("command.status.depth", count=runner.depth) if runner and runner.depth else ""
    lines = [
        ctx.text("command.status.agent", agent=ctx.agent.name),
        ctx.text("command.status.session", session=str(key)),
        ctx.text("command.status.state", state=ctx.text(f"command.status.state.{state}")) + depth,
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
    if any(m.get("role") == "system" for m in history):
        lines.append(ctx.text("command.status.summarised"))
    return "\n".join(lines)


async def _compact(ctx: CommandContext) -> str:
    compactor = ctx.gateway.compactor
    if compactor is None:
        return ctx.text("command.compact.unavailable")
    try:
        return await compactor.compact(
            ctx.key, ctx.agent, reason="manual", actor=ctx.message.sender_id or "user", focus=ctx.args
        )
    except SessionBusyError:
        return ctx.text("command.compact.busy")


async def _help(ctx: CommandContext) -> str:
    return ctx.text("command.help.title") + "\n" + ctx.gateway.commands.help_text(ctx.locale)


def register_builtin_commands(gateway: GatewayCore) -> None:
    gateway.commands.register("restart", "command.help.restart", _restart)
    gateway.commands.register("stop", "command.help.stop", _stop)
    gateway.commands.register("status", "command.help.status", _status)
    gateway.commands.register("compact", "command.help.compact", _compact)
    gateway.commands.register("forget", "forget.help", ForgetCommand(gateway))
    gateway.commands.register("help", "command.help.help", _help)
