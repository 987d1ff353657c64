"""The API's code tables: the HTTP status per reply error code, and the request codes that name a reply's failure.

Light on purpose (only `messages`): `agenthub chat` connected to a daemon reads it without the server's imports.
"""

from __future__ import annotations

from agenthub.messages import ErrorCode

STATUS: dict[str, int] = {
    ErrorCode.INVALID_ID: 400,
    ErrorCode.UNKNOWN_AGENT: 404,
    ErrorCode.STOPPED: 409,
    ErrorCode.RESTART: 409,
    ErrorCode.TIMEOUT: 504,
    ErrorCode.LLM_ERROR: 502,
    ErrorCode.SHUTDOWN: 503,
    ErrorCode.QUEUE_FULL: 429,
    ErrorCode.BUDGET_EXCEEDED: 429,
    ErrorCode.PATH_REFUSED: 403,
    ErrorCode.STORAGE_UNAVAILABLE: 503,
    ErrorCode.LEASE_LOST: 503,
}
"""The HTTP status of a reply that ended in an error with this code; any other code is a 500."""
REQUEST_CODES: dict[str, ErrorCode] = {"agent_not_found": ErrorCode.UNKNOWN_AGENT}
"""The API's request error codes that name the same failure as a reply error code (a client relaying the API's
answers as reply events, `agenthub chat` connected to a daemon, reads this)."""


def status_of(code: str) -> int:
    return STATUS.get(code, 500)


def reply_code(api_code: str) -> str:
    """The reply error code for an API error code (the same string unless `REQUEST_CODES` maps it)."""
    return REQUEST_CODES.get(api_code, api_code)
