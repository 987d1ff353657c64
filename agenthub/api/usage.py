"""`GET /api/usage?by=user|chat|agent|model&period=day|month[&from=&to=]`: usage rows with cost where priced."""

from __future__ import annotations

import datetime as dt
import json

from aiohttp import web

from agenthub.api.errors import ApiError
from agenthub.api.host import ApiServices
from agenthub.errors import StorageError
from agenthub.usage.periods import day_of
from agenthub.usage.report import BY, PERIODS, group

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
    except StorageError:
        raise ApiError(503, "storage_unavailable", "usage cannot be read right now") from None
    lines = group(rows, by, period, services.settings.llm.prices)  # type: ignore[arg-type]
    body = {
        "by": by,
        "period": period,
        "from": first,
        "to": last,
        "timezone": services.zone.key,
        "rows": [line.as_dict() for line in lines],
    }
    return web.json_response(body, dumps=lambda d: json.dumps(d, ensure_ascii=False))
