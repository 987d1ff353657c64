"""Every check in the order a first start meets them: configuration, data dir, port, store, model, channels, MCP.
A check that breaks is one failing line naming the error's type, never a traceback."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import structlog

from agenthub.config import DEFAULT_CONFIG_FILE, Settings
from agenthub.doctor import Check, fail, ok
from agenthub.doctor.local import data_dir_checks, port_check
from agenthub.doctor.model import model_checks
from agenthub.doctor.services import agent_checks, channel_checks, mcp_checks, postgres_check

log = structlog.get_logger(__name__)


def config_check(config_path: Path | None) -> Check:
    path = config_path if config_path is not None else DEFAULT_CONFIG_FILE
    if path.is_file():
        return ok("config", f"{path.resolve()} read (with .env and AGENTHUB_* variables)")
    return ok("config", f"no {path}: defaults with .env and AGENTHUB_* variables")


async def _safely(name: str, check: Callable[[], Awaitable[list[Check]]]) -> list[Check]:
    try:
        return await check()
    except Exception as e:  # a doctor reports; it does not crash on what it examines
        log.exception("doctor_check_failed", check=name)
        return [fail(name, f"the check itself failed ({type(e).__name__})", "run with the log to see why")]


async def run_checks(settings: Settings, config_path: Path | None) -> list[Check]:
    checks = [config_check(config_path), *data_dir_checks(settings), port_check(settings)]
    checks.extend(await _safely("store", lambda: postgres_check(settings)))
    checks.extend(await _safely("model", lambda: model_checks(settings.llm)))
    checks.extend(await _safely("channels", lambda: channel_checks(settings)))
    checks.extend(await _safely("agents", lambda: asyncio.to_thread(agent_checks, settings)))
    checks.extend(await _safely("mcp", lambda: mcp_checks(settings)))
    return checks
