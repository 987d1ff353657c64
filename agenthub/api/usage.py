"""`GET /api/usage?by=user|chat|agent|model&period=day|month[&from=&to=]`: usage rows with cost where priced."""

from __future__ import annotations

import datetime as dt
from typing import Any

from aiohttp import web

from agenthub.api.errors import ApiError
from agenthub.api.host import ApiServices
from agenthub.api.requests import CHANNEL as HTTP_CHANNEL
from agenthub.errors import StorageError
from agenthub.jsonsafe import utf8_dumps
from agenthub.storage.ports import UsageStore
from agenthub.usage.periods import day_of
from agenthub.usage.report import BY, PERIODS, Line, group

MAX_DAYS = 366
"""The widest range one request may ask for."""


def _choice(request: web.Request, name: str, allowed: tuple[str, ...], default: str) -> str:
    value = request.query.get(name, default)
    if value not in allowed:
        raise ApiError(400, "invalid_query", f"'{name}' must be one of: {', '.join(allowed)}")
    return value


def _date(request: web.Request, name: str, default: str) -> str:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        return dt.date.fromisoformat(raw).isoformat()
    except ValueError:
        raise ApiError(400, "invalid_query", f"'{name}' must be an ISO date such as 2026-12-03") from None


async def usage_report(api: ApiServices, request: web.Request) -> web.Response:
    """Rows per period and who (by user they name the channel and sender: on HTTP the API token's name); the
    default range is this month up to today, in `scheduler.timezone`."""
    services = api.usage
    if services is None:
        raise ApiError(503, "usage_unavailable", "usage is not recorded by this instance")
    by = _choice(request, "by", BY, "user")
    period = _choice(request, "period", PERIODS, "day")
    today = day_of(services.clock(), services.zone)
    first = _date(request, "from", today[:7] + "-01")
    last = _date(request, "to", today)
    if first > last:
        raise ApiError(400, "invalid_query", "'from' must not be after 'to'")
    if (dt.date.fromisoformat(last) - dt.date.fromisoformat(first)).days >= MAX_DAYS:
        raise ApiError(400, "invalid_query", f"ask for at most {MAX_DAYS} days at a time")
    try:
        await services.recorder.flush()
        rows = await services.store.days(first, last)
        lines = group(rows, by, period, services.settings.llm.prices)  # type: ignore[arg-type]
        names = await _names(services.store, lines) if by == "user" else None
    except StorageError:
        raise ApiError(503, "storage_unavailable", "usage cannot be read right now") from None
    body = {
        "by": by,
        "period": period,
        "from": first,
        "to": last,
        "timezone": services.zone.key,
        "rows": [line.as_dict() if names is None else _named(line, names) for line in lines],
    }
    return web.json_response(body, dumps=utf8_dumps)


async def _names(store: UsageStore, lines: list[Line]) -> dict[tuple[str, str], str]:
    """The display names of the rows' senders that their channels gave."""
    return await store.sender_names({(line.who["channel"], line.who["sender"]) for line in lines})


def _named(line: Line, names: dict[tuple[str, str], str]) -> dict[str, Any]:
    """A per-person row with `sender_name`: the name the channel gave, on HTTP the API token's name (the sender id),
    else null (the console shows the id)."""
    channel, sender = line.who["channel"], line.who["sender"]
    name = names.get((channel, sender)) or (sender if channel == HTTP_CHANNEL else None)
    return {**line.as_dict(), "sender_name": name}
