"""`agenthub doctor`: check what a start needs, one line per check; exit 0 when nothing fails, else 1."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Any

from agenthub.config import load_settings
from agenthub.errors import ConfigError
from agenthub.log import configure_logging

AGENT_LOADER_LOGGER = "agenthub.agent.definition"
"""Logs each broken agent (`agent_broken`), which the `agents` check reports instead."""


def add_parser(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "doctor", help="check the configuration, data dir, port, model endpoint, channels, database and MCP servers"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from agenthub.doctor import exit_status, fail
    from agenthub.doctor.run import run_checks

    configure_logging("error", stream=sys.stderr)  # the checks' own lines are the output
    logging.getLogger(AGENT_LOADER_LOGGER).setLevel(logging.CRITICAL)  # a broken agent is the agents check's line
    try:
        settings = load_settings(args.config)
    except ConfigError as e:
        print(fail("config", str(e), "fix that key in agenthub.toml, .env or the AGENTHUB_* variable").line())
        return 1
    checks = asyncio.run(run_checks(settings, args.config))
    for check in checks:
        print(check.line(), flush=True)
    status = exit_status(checks)
    failed = sum(c.status == "fail" for c in checks)
    warned = sum(c.status == "warn" for c in checks)
    print(f"\n{failed} failed, {warned} warning(s), {len(checks) - failed - warned} ok")
    return status
