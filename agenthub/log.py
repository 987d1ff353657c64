"""structlog set-up: JSON lines off a TTY, readable console on a TTY, stdlib loggers routed through it."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import structlog

_SECRET_KEYS = frozenset(
    {"api_key", "secret", "token", "password", "authorization", "encoding_aes_key", "cookie", "x-api-key"}
)
_SECRET_SUFFIXES = ("_secret", "_token", "_password", "_api_key", "_aes_key", "_access_key")
_PER_CALL_LOGGER = "httpx2"
"""The Anthropic SDK's HTTP client: one info line per request, on every model call's path."""
_ROUTED_LOGGERS = ("aiohttp", "wechatpy", "Lark", "lark_oapi", "anthropic", "httpx", "httpx2", "asyncio")
# `access_token=…` in a logged URL, `Bearer …` / `api_key: …` in a message: keep the name, hide the value.
_SECRET_IN_TEXT = re.compile(
    r"(?i)(\b(?:access_token|token|api_key|apikey|secret|app_secret|password|key|signature)\s*[=:]\s*)"
    r"([^\s&,;\"']+)|(\bBearer\s+)([^\s\"',;]+)"
)
REDACTED = "***"


def is_secret_key(key: str) -> bool:
    """Whether a log field of this name holds a secret (`session_key`, `input_tokens` do not)."""
    lowered = key.lower()
    return lowered in _SECRET_KEYS or lowered.endswith(_SECRET_SUFFIXES)


def redact_text(text: str) -> str:
    """Hide secret values embedded in free text such as a logged URL or header line."""
    return _SECRET_IN_TEXT.sub(lambda m: (m.group(1) or m.group(3)) + REDACTED, text)


def _redact(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    for key, value in event.items():
        if is_secret_key(key):
            event[key] = REDACTED
        elif isinstance(value, str) and key != "timestamp":
            event[key] = redact_text(value)
    return event


def configure_logging(
    level: str = "info",
    fmt: Literal["auto", "json", "console", "line"] = "auto",
    *,
    stream: Any = None,
    cache_loggers: bool = False,
) -> None:
    """Configure structlog and the stdlib root logger once, in the composition root. `cache_loggers`: each logger
    keeps its processor chain from its first use (the daemon, configured once: no rebuild per log call); off where
    logging is configured again later (tests capturing logs). `line`: one plain line per record for an operator at
    a command (`agenthub: warning: <event> key=value …`), no timestamp and no traceback."""
    out = stream if stream is not None else sys.stdout
    use_console = fmt == "console" or (fmt == "auto" and hasattr(out, "isatty") and out.isatty())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any = structlog.dev.ConsoleRenderer(colors=False) if use_console else structlog.processors.JSONRenderer()
    if fmt == "line":
        renderer = _one_line
    structlog.configure(
        processors=[structlog.stdlib.filter_by_level, *shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=cache_loggers,
    )
    final: list[Any] = [structlog.stdlib.ProcessorFormatter.remove_processors_meta]
    if not use_console and fmt != "line":
        final.append(structlog.processors.format_exc_info)
    final += [_redact, renderer]  # last, so exception text and stdlib messages are redacted too
    formatter = structlog.stdlib.ProcessorFormatter(foreign_pre_chain=shared, processors=final)
    handler = _handler_for(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    route_library_loggers()
    # the SDK's HTTP client logs each model call at info; `llm_call` says the same and more (debug keeps both)
    quiet = root.getEffectiveLevel() > logging.DEBUG
    logging.getLogger(_PER_CALL_LOGGER).setLevel(logging.WARNING if quiet else logging.NOTSET)


_NOT_FOR_AN_OPERATOR = ("timestamp", "logger", "exc_info", "stack_info", "exception")
_BREAKS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""What would cut a line (`\\n`, `\\r`, a vertical tab, NEL, U+2028/9) or draw on a terminal (an escape)."""


def _one_line(_: Any, __: str, event: dict[str, Any]) -> str:
    """`agenthub: warning: history_line_corrupt path=… line=2`: what happened and where, on one line."""
    level, what = event.pop("level", "log"), event.pop("event", "")
    fields = [f"{key}={value}" for key, value in event.items() if key not in _NOT_FOR_AN_OPERATOR]
    return _BREAKS.sub(" ", " ".join([f"agenthub: {level}:", str(what), *fields]))


class _StandardStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to `sys.stdout` / `sys.stderr` as they are when a record is written, not as they were when logging was
    configured (a replaced stream, e.g. one closed since, would turn every later record into a logging error)."""

    def __init__(self, name: str) -> None:
        self._stream_name = name
        super().__init__()

    @property
    def stream(self) -> Any:
        return getattr(sys, self._stream_name)

    @stream.setter
    def stream(self, value: Any) -> None:
        """The stream is always the current one of `sys`."""


def _handler_for(stream: Any) -> logging.Handler:
    if stream is None or stream is sys.stdout:
        return _StandardStreamHandler("stdout")
    if stream is sys.stderr:
        return _StandardStreamHandler("stderr")
    return logging.StreamHandler(stream)


def route_library_loggers() -> None:
    """Strip the SDKs' own handlers so their records reach ours; call again after importing an SDK late.

    lark-oapi adds a plain-text stdout handler to the `Lark` logger when it is imported; the Feishu channel
    imports it lazily (in `start()`) and replaces that handler itself, right after the import.
    """
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
