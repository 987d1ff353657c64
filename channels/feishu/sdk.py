"""lark-oapi glue, imported lazily: log routing, the event dispatcher, and the long-connection thread."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import structlog

log = structlog.get_logger(__name__)

NOOP_EVENTS = (
    "im.message.message_read_v1",
    "im.message.reaction.created_v1",
    "im.message.reaction.deleted_v1",
    "im.message.recalled_v1",
    "im.chat.member.bot.added_v1",
    "im.chat.member.bot.deleted_v1",
    "im.chat.member.user.added_v1",
    "im.chat.member.user.deleted_v1",
    "im.chat.access_event.bot_p2p_chat_entered_v1",
    "im.chat.updated_v1",
    "im.chat.disbanded_v1",
    "application.bot.menu_v6",
)
"""Events a chat bot app commonly subscribes to and AgentHub does not act on; acknowledged, never a 500."""

_SECRETISH = re.compile(r"(access_key|ticket|token|secret|app_secret)=([^&\s]+)", re.IGNORECASE)
_NORMAL_CLOSE = "1000 (OK)"
"""A websocket closed normally (our own stop); the SDK still reports its receive loop's exit as an ERROR."""


class _ToStructlog(logging.Handler):
    """Forwards the SDK's "Lark" logger into structlog, with credential-looking query values masked."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = _SECRETISH.sub(r"\1=***", record.getMessage())
            level = logging.INFO if _NORMAL_CLOSE in message else record.levelno
            log.log(level, "lark_sdk_log", sdk_level=record.levelname, message=message)
        except Exception:
            self.handleError(record)


def route_sdk_logging(level: int = logging.INFO) -> None:
    """Drop lark-oapi's stdout handler and send its records through structlog instead."""
    logger = logging.getLogger("Lark")
    for handler in list(logger.handlers):
        if not isinstance(handler, _ToStructlog):
            logger.removeHandler(handler)
    if not any(isinstance(h, _ToStructlog) for h in logger.handlers):
        logger.addHandler(_ToStructlog())
    logger.propagate = False
    logger.setLevel(level)


def import_sdk() -> Any:
    """Import lark-oapi (about 3 s: run it off the event loop) and route its logging."""
    import lark_oapi

    route_sdk_logging()
    return lark_oapi


def build_dispatcher(
    encrypt_key: str,
    verification_token: str,
    on_message: Callable[[dict[str, Any]], None],
    extra_events: list[str],
) -> Any:
    """An `EventDispatcherHandler` that hands message events to `on_message` as plain dicts and acknowledges
    every other event type, registered or not, instead of answering 500 ("processor not found")."""
    import lark_oapi as lark
    from lark_oapi.event.custom import CustomizedEventProcessor

    def receive(data: Any) -> None:
        on_message(envelope_of(data))

    builder = lark.EventDispatcherHandler.builder(encrypt_key, verification_token)
    builder.register_p2_im_message_receive_v1(receive)
    for event_type in dict.fromkeys([*NOOP_EVENTS, *extra_events]):
        if event_type != "im.message.receive_v1":
            builder.register_p2_customized_event(event_type, _ignore)
    dispatcher = builder.build()
    processors = getattr(dispatcher, "_processorMap", None)
    if isinstance(processors, dict):
        dispatcher._processorMap = _AckAll(processors, CustomizedEventProcessor(_ignore))
    else:  # the SDK changed shape: registered types still work, others would be answered 500
        log.warning("feishu_default_event_handler_unavailable")
    return dispatcher


class _AckAll(dict[str, Any]):
    """A processor map that returns a no-op processor for any event type nobody registered."""

    def __init__(self, processors: dict[str, Any], fallback: Any) -> None:
        super().__init__(processors)
        self._fallback = fallback

    def get(self, key: str, default: Any = None) -> Any:
        found = super().get(key)
        if found is None:
            log.info("feishu_event_unhandled", event_key=key)
            return self._fallback
        return found


def _ignore(data: Any) -> None:
    log.debug("feishu_event_ignored", event_type=getattr(getattr(data, "header", None), "event_type", None))


def envelope_of(data: Any) -> dict[str, Any]:
    """The SDK's typed event back as the plain wire dict."""
    import json

    from lark_oapi.core.json import JSON

    value = json.loads(JSON.marshal(data))
    return value if isinstance(value, dict) else {}
