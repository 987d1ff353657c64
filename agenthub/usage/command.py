"""`/usage`: the sender's and the chat's usage today and this month, with what is left of their budgets."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agenthub.errors import StorageError
from agenthub.gateway.commands import CommandContext
from agenthub.storage.usage import Scope, month_days
from agenthub.usage.admission import limits_for
from agenthub.usage.periods import day_of
from agenthub.usage.report import Line, format_cost, totals

if TYPE_CHECKING:
    from agenthub.usage.wiring import UsageServices


class UsageCommand:
    """Reads the day roll-ups of this month (after storing the calls still pending)."""

    name, help_key = "usage", "usage.help"

    def __init__(self, services: UsageServices) -> None:
        self.services = services

    async def __call__(self, ctx: CommandContext) -> str:
        if ctx.args.strip():  # no period nor person to pick: `/usage` always shows today and this month
            return ctx.text("usage.usage")
        services, msg = self.services, ctx.message
        today = day_of(services.clock(), services.zone)
        try:
            await services.recorder.flush()
            rows = await services.store.days(month_days(today)[0], today)
        except StorageError:
            return ctx.text("usage.unavailable")
        limits = limits_for(services.settings.budgets, ctx.agent)
        prices = services.settings.llm.prices
        lines = []
        for kind, title, ident, (day_limit, month_limit) in (
            ("user", "usage.title.user", msg.sender_id, (limits.user_day, limits.user_month)),
            ("chat", "usage.title.chat", msg.chat_id, (limits.chat_day, limits.chat_month)),
        ):
            scope = Scope(kind, msg.channel, ident)  # type: ignore[arg-type]
            lines.append(ctx.text(title))
            lines.append(_line(ctx, "usage.today", totals(rows, scope, today, prices), day_limit))
            lines.append(_line(ctx, "usage.month", totals(rows, scope, month_days(today)[0], prices), month_limit))
        return "\n".join(lines)


def _line(ctx: CommandContext, period: str, line: Line, limit: int) -> str:
    cost = ctx.text("usage.cost", amount=format_cost(line.cost)) if line.cost else ""
    if limit > 0:
        left = ctx.text("usage.left", left=max(0, limit - line.tokens), limit=limit)
    else:
        left = ctx.text("usage.unlimited")
    return "  " + ctx.text("usage.line", period=ctx.text(period), tokens=line.tokens, cost=cost, left=left)
