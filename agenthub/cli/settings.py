"""The settings a subcommand runs with: `--config` (else ./agenthub.toml), `.env` and `AGENTHUB_…`, or one line
on stderr naming what is wrong."""

from __future__ import annotations

import argparse
import sys

from agenthub.config import Settings, load_settings
from agenthub.errors import ConfigError


def settings_or_say_why(args: argparse.Namespace) -> Settings | None:
    """The settings, or None once the reason they cannot be loaded is printed (the caller exits with its usage
    status)."""
    try:
        return load_settings(args.config)
    except ConfigError as e:
        print(f"agenthub: {e}", file=sys.stderr)
        return None
