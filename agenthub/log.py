"""structlog set-up: JSON lines off a TTY, readable console on a TTY, stdlib loggers routed through it."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import structlog

_SECRET_KEYS = frozenset({"api_key", "secret", "token", "password", "authorization", "encoding_aes_key"})
_ROUTED_LOGGERS = ("aiohttp", "wechatpy", "Lark", "lark_oapi", "anthropic", "httpx", "httpx2", "asyncio")


def _redact(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    for key in event.keys() & _SECRET_KEYS:
        event[key] = "***"
    return event


def configure_logging(
    level: str = "info", fmt: Literal["auto", "json", "console"] = "auto", *, stream: Any = None
) -> None:
    """Configure structlog and the stdlib root logger once, in the composition root."""
    out = stream if stream is not None else sys.stdout
    use_console = fmt == "console" or (fmt == "auto" and hasattr(out, "isatty") and out.isatty())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _redact,
    ]
    renderer: Any = structlog.dev.ConsoleRenderer(colors=False) if use_console else structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in _ROUTED_LOGGERS:
        routed = logging.getLogger(name)
        routed.handlers[:] = []
        routed.propagate = True


@contextmanager
def bound_turn(session_key: str, channel: str, message_id: str) -> Iterator[None]:
    """Bind the turn's identifiers to every log line emitted inside the block (and its tasks)."""
    tokens = structlog.contextvars.bind_contextvars(session_key=session_key, channel=channel, message_id=message_id)
    try:
        yield
    finally:
        structlog.contextvars.reset_contextvars(**tokens)
