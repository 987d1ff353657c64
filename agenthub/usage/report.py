"""Usage as people read it: rows grouped by user, chat, agent or model per day or month, with cost where priced."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agenthub.config import PriceSettings
from agenthub.storage.usage import TOKEN_KINDS, Period, Scope, UsageRow

By = Literal["user", "chat", "agent", "model"]
BY: tuple[By, ...] = ("user", "chat", "agent", "model")
PERIODS: tuple[Period, ...] = ("day", "month")


def cost_of(row: UsageRow, prices: Mapping[str, PriceSettings]) -> tuple[str, float] | None:
    """(currency, amount) of `row` at its model's price per million tokens; None: the model is not priced."""
    price = prices.get(row.model)
    if price is None:
        return None
    amount = (
        row.input * price.input
        + row.output * price.output
        + row.cache_read * price.cache_read
        + row.cache_write * price.cache_write
    )
    return price.currency, amount / 1_000_000


@dataclass
class Line:
    """One row of a usage view: who or what, the period, the four kinds, calls, and cost per currency."""

    period: str
    who: dict[str, str]
    kinds: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_KINDS, 0))
    calls: int = 0
    estimated: int = 0
    cost: dict[str, float] = field(default_factory=dict)

    def add(self, row: UsageRow, prices: Mapping[str, PriceSettings]) -> None:
        for kind in TOKEN_KINDS:
            self.kinds[kind] += getattr(row, kind)
        self.calls += row.calls
        self.estimated += row.estimated
        priced = cost_of(row, prices)
        if priced is not None:
            self.cost[priced[0]] = self.cost.get(priced[0], 0.0) + priced[1]

    @property
    def tokens(self) -> int:
        return sum(self.kinds.values())

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"period": self.period, **self.who, **self.kinds, "tokens": self.tokens}
        data |= {"calls": self.calls, "estimated_calls": self.estimated}
        data["cost"] = {c: round(v, 6) for c, v in self.cost.items()} or None
        return data


def _who(row: UsageRow, by: By) -> dict[str, str]:
    if by == "user":
        return {"channel": row.channel, "sender": row.sender_id}
    if by == "chat":
        return {"channel": row.channel, "chat_id": row.chat_id}
    if by == "agent":
        return {"agent": row.agent}
    return {"model": row.model}


def group(rows: Iterable[UsageRow], by: By, period: Period, prices: Mapping[str, PriceSettings]) -> list[Line]:
    """The rows summed per (period, who), newest period first, then most tokens first."""
    lines: dict[tuple[str, ...], Line] = {}
    for row in rows:
        bucket = row.day if period == "day" else row.day[:7]
        who = _who(row, by)
        key = (bucket, *who.values())
        line = lines.get(key)
        if line is None:
            line = lines[key] = Line(bucket, who)
        line.add(row, prices)
    return sorted(lines.values(), key=lambda line: (line.period, line.tokens), reverse=True)


def totals(rows: Iterable[UsageRow], scope: Scope, since: str, prices: Mapping[str, PriceSettings]) -> Line:
    """One scope's sum over the days from `since`."""
    line = Line(since, {})
    for row in rows:
        if row.day >= since and scope.covers(row):
            line.add(row, prices)
    return line


def format_cost(cost: Mapping[str, float]) -> str:
    return " + ".join(f"{amount:.4f} {currency}" for currency, amount in sorted(cost.items()))
