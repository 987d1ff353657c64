"""The built-in commands of design §6 and §14: /restart and /forget (double-confirm), /stop, /status, /compact,
/help."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from agenthub import i18n
from agenthub.errors import SessionBusyError
from agenthub.forget.command import ForgetCommand
from agenthub.gateway.commands import CommandContext
from agenthub.llm.tokens import estimate_tokens

if TYPE_CHECKING:
    from agenthub.gateway.core import GatewayCore

log = structlog.get_logger(__name__)

COMPACTION_STOPPED = " Stopped the compaction that was summarising older messages."


async def _restart(ctx: CommandContext) -> str:
    gw, key = ctx.gateway, ctx.key
    pending = gw.restart_pending()
    window = gw.settings.session.restart_confirm_s
    asker = (key, ctx.message.sender_id)  # in a group, only the member who was asked can confirm
    asked_at = pending.get(asker)
    now = gw.clock()
    if asked_at is None or now - asked_at > window:
        pending[asker] = now
        return (
            f"This clears this chat's conversation history. Send /restart again within {int(window)} seconds "
            "to confirm."
        )
    del pending[asker]
    gw.abort(key, "restart")
    await gw.cancel_background(key)  # a compaction in flight is aborted, its model call too
    async with gw.hold(key):  # the aborted turn has stored what it will; queued turns start after the clear
        await gw.cancel_background(key)  # one the aborted turn's after-turn hook started meanwhile
        await gw.history.clear(key)
    log.info("session_restarted", session_key=str(key))
    return "Done: this chat starts fresh. (Other chats and long-term memory are untouched.)"


async def _stop(ctx: CommandContext) -> str:
    """Stop the sender's running reply and drop the messages they queued behind it (never another member's)."""
    dropped = ctx.gateway.drop_queued(ctx.key, ctx.message.sender_id)
    queued = f" Dropped {dropped} queued message(s) of yours." if dropped else ""
    runner = ctx.gateway.runner(ctx.key)
    running = runner.current if runner is not None else None
    if running is not None and running.senders - {ctx.message.sender_id}:
        # in a shared (group) session, one member must not cut off another member's answer
        return "Only the person who asked can stop this reply." + queued
    compaction = COMPACTION_STOPPED if await ctx.gateway.cancel_background(ctx.key) else ""
    if ctx.gateway.abort(ctx.key, "stopped"):
        await ctx.gateway.wait_turn_done(ctx.key)
        return "Stopped the running reply." + queued + compaction + " The conversation is kept."
    if compaction:
        return (queued + compaction).strip() + " The conversation is kept as it was."
    return (queued.strip() + " Nothing else is running.") if dropped else "Nothing is running in this chat."


async def _status(ctx: CommandContext) -> str:
    gw, key = ctx.gateway, ctx.key
    session = gw.sessions.get(key)
    state = session.status.value if session is not None else "idle"
    runner = gw.runner(key)
    history = await gw.history.load(key)
    meta = await gw.history.get_meta(key)
    lines = [
        f"agent: {ctx.agent.name}",
        f"session: {key}",
        f"state: {state}" + (f", {runner.depth} message(s) in progress or queued" if runner and runner.depth else ""),
        f"messages: {len(history)} (about {estimate_tokens(history)} tokens estimated)",
    ]
    if meta is not None and meta.last_usage:
        usage = meta.last_usage
        lines.append(
            f"last model call: {usage.get('input_tokens', 0)} input, "
            f"{usage.get('cache_read_input_tokens', 0)} cached, {usage.get('output_tokens', 0)} output tokens"
        )
    if any(m.get("role") == "system" for m in history):
        lines.append("an earlier part of the conversation is summarised")
    return "\n".join(lines)


async def _compact(ctx: CommandContext) -> str:
    compactor = ctx.gateway.compactor
    if compactor is None:
        return "Compaction is not available."
    try:
        return await compactor.compact(
            ctx.key, ctx.agent, reason="manual", actor=ctx.message.sender_id or "user", focus=ctx.args
        )
    except SessionBusyError:
        return "This chat is busy answering; try /compact again when the reply is done."


async def _help(ctx: CommandContext) -> str:
    return "Commands:\n" + ctx.gateway.commands.help_text()


def register_builtin_commands(gateway: GatewayCore) -> None:
    gateway.commands.register("restart", "clear this chat's history (send twice to confirm)", _restart)
    gateway.commands.register("stop", "stop the reply that is running", _stop)
    gateway.commands.register("status", "show this chat's state and context size", _status)
    gateway.commands.register(
        "compact",
        "summarise older messages to free context; /compact <focus> says what the summary should keep",
        _compact,
    )
    gateway.commands.register("forget", i18n.text("forget.help", "en"), ForgetCommand(gateway))
    gateway.commands.register("help", "list the commands", _help)
