"""Logging: JSON lines off a TTY, console on a TTY, per-turn context, stdlib loggers routed, secrets redacted."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from agenthub.log import bound_turn, configure_logging, is_secret_key, redact_text, route_library_loggers


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    lark = logging.getLogger("Lark")
    lark_state = (lark.handlers[:], lark.propagate)
    yield
    structlog.configure(**saved)
    root.handlers[:], root.level = handlers, level
    lark.handlers[:], lark.propagate = lark_state
    structlog.contextvars.clear_contextvars()


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def _lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_json_lines_when_not_a_tty() -> None:
    out = io.StringIO()
    configure_logging("info", stream=out)
    log = structlog.get_logger("agenthub.test")
    log.info("session_created", session_key="a:b:c", messages=3)
    log.debug("too_detailed")
    [line] = _lines(out)
    assert line["event"] == "session_created" and line["messages"] == 3 and line["session_key"] == "a:b:c"
    assert line["level"] == "info" and line["logger"] == "agenthub.test" and line["timestamp"].endswith("Z")


def test_console_output_on_a_tty() -> None:
    out = FakeTTY()
    configure_logging("info", stream=out)
    structlog.get_logger("x").warning("disk_low", free_mb=12)
    text = out.getvalue()
    assert "disk_low" in text and "free_mb=12" in text and not text.startswith("{")


async def test_turn_context_is_bound_per_turn_and_reaches_tasks() -> None:
    out = io.StringIO()
    configure_logging("info", fmt="json", stream=out)
    log = structlog.get_logger("agenthub.gateway")

    async def turn(key: str, message_id: str) -> None:
        with bound_turn(key, "wecom", message_id):
            await asyncio.sleep(0)
            await asyncio.create_task(asyncio.sleep(0))
            log.info("turn_step")

    await asyncio.gather(turn("a:wecom:1", "m1"), turn("a:wecom:2", "m2"))
    log.info("after_turns")
    lines = _lines(out)
    steps = {(line["session_key"], line["message_id"], line["channel"]) for line in lines[:2]}
    assert steps == {("a:wecom:1", "m1", "wecom"), ("a:wecom:2", "m2", "wecom")}
    assert "session_key" not in lines[2] and "message_id" not in lines[2]


def test_stdlib_library_loggers_come_out_as_json() -> None:
    out = io.StringIO()
    configure_logging("info", fmt="json", stream=out)
    logging.getLogger("wechatpy.client").warning("token expired for %s", "corp1")
    [line] = _lines(out)
    assert line == {**line, "event": "token expired for corp1", "level": "warning", "logger": "wechatpy.client"}


def test_late_sdk_handlers_are_rerouted() -> None:
    out, sdk_out = io.StringIO(), io.StringIO()
    configure_logging("info", fmt="json", stream=out)
    lark = logging.getLogger("Lark")
    lark.addHandler(logging.StreamHandler(sdk_out))  # what lark-oapi does when it is imported
    route_library_loggers()
    lark.warning("ws reconnect")
    assert sdk_out.getvalue() == ""
    assert _lines(out)[0]["event"] == "ws reconnect"


def test_line_format_is_one_plain_line_per_warning_without_traceback_or_info() -> None:
    out = io.StringIO()
    configure_logging("warning", fmt="line", stream=out)
    log = structlog.get_logger("agenthub.test")
    log.info("copied", sessions=3)
    log.warning("history_line_corrupt", path="/d/a.jsonl", line=2)
    try:
        raise RuntimeError("first line\nsecond line")
    except RuntimeError:
        log.exception("job_unreadable", token="t0")
    logging.getLogger("psycopg.pool").warning("pool %s is slow", "main")
    assert out.getvalue().splitlines() == [
        "agenthub: warning: history_line_corrupt path=/d/a.jsonl line=2",
        "agenthub: error: job_unreadable token=***",
        "agenthub: warning: pool main is slow",
    ]


def test_secrets_are_redacted_in_fields_messages_and_tracebacks() -> None:
    out = io.StringIO()
    configure_logging("info", fmt="json", stream=out)
    log = structlog.get_logger("agenthub.test")
    log.info("llm_configured", api_key="sk-abc", app_secret="s3", corp_token="t0", session_key="a:b:c", input_tokens=5)
    logging.getLogger("httpx").info("HTTP Request: POST https://qyapi/send?access_token=AT123&debug=1")
    try:
        raise RuntimeError("upstream said Authorization: Bearer sk-live-999")
    except RuntimeError:
        log.exception("call_failed")
    text = out.getvalue()
    for secret in ("sk-abc", 's3"', "t0", "AT123", "sk-live-999"):
        assert secret not in text
    first, second, third = _lines(out)
    assert first["api_key"] == "***" and first["session_key"] == "a:b:c" and first["input_tokens"] == 5
    assert second["event"].endswith("access_token=***&debug=1")
    assert "Bearer ***" in third["exception"]


def test_secret_key_names() -> None:
    assert all(map(is_secret_key, ["api_key", "API_KEY", "encoding_aes_key", "tenant_access_token", "password"]))
    assert not any(map(is_secret_key, ["session_key", "input_tokens", "max_tokens", "key_count"]))
    assert redact_text("url?token=abc&x=1 key: zzz") == "url?token=***&x=1 key: ***"


def test_line_format_keeps_a_value_with_any_line_break_or_control_character_on_its_one_line() -> None:
    """A path or a message may hold what a terminal or `splitlines` takes as a line break (vertical tab, form feed,
    NEL, the Unicode separators) or an escape sequence: one record stays one line, nothing is drawn by it."""
    out = io.StringIO()
    configure_logging("warning", fmt="line", stream=out)
    log = structlog.get_logger("agenthub.test")
    log.warning("history_line_corrupt", path="/d/a\x0bb\x0cc\x1cd\x85e\u2028f\u2029g\x1b[2Kh.jsonl", line=2)
    logging.getLogger("agenthub.test").warning("said\r\nover\x0btwo")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert lines[0] == "agenthub: warning: history_line_corrupt path=/d/a b c d e f g [2Kh.jsonl line=2"
    assert lines[1] == "agenthub: warning: said  over two"
