"""Every check in the order a first start meets them: configuration, data dir, port, store, model, channels, MCP."""

from __future__ import annotations

from pathlib import Path

from agenthub.config import DEFAULT_CONFIG_FILE, Settings
from agenthub.doctor import Check, ok
from agenthub.doctor.local import data_dir_checks, port_check
from agenthub.doctor.model import model_checks
from agenthub.doctor.services import channel_checks, mcp_checks, postgres_check


def config_check(config_path: Path | None) -> Check:
    path = config_path if config_path is not None else DEFAULT_CONFIG_FILE
    if path.is_file():
        return ok("config", f"{path.resolve()} read (with .env and AGENTHUB_* variables)")
    return ok("config", f"no {path}: defaults with .env and AGENTHUB_* variables")


async def run_checks(settings: Settings, config_path: Path | None) -> list[Check]:
    checks = [config_check(config_path), *data_dir_checks(settings), port_check(settings)]
    checks.extend(await postgres_check(settings))
    checks.extend(await model_checks(settings.llm))
    checks.extend(await channel_checks(settings))
    checks.extend(await mcp_checks(settings))
    return checks
