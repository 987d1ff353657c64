"""`agenthub serve`: run the daemon in the foreground (systemd runs exactly this)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agenthub.config import load_settings, warn_about_timeouts
from agenthub.errors import AddressNotReadyError, ConfigError, StorageError
from agenthub.hosting.datalock import DataDirLocked
from agenthub.log import configure_logging


def port_number(text: str) -> int:
    """`--port`: a whole number a socket can listen on (0: any free port)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError("must be a port number, 0 to 65535")
    return port


def add_parser(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("serve", help="run the daemon (HTTP API, console, channels)")
    parser.add_argument("--host", help="listen address (default: http.host)")
    parser.add_argument("--port", type=port_number, help="listen port (default: http.port)")
    parser.add_argument(
        "--console-hint",
        action="store_true",
        help="print the console URL, and create a first API token if there is none",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from agenthub.hosting.daemon import run_daemon

    overrides: dict[str, Any] = {}
    try:
        settings = load_settings(args.config)
        if args.host or args.port is not None:
            http = settings.http.model_copy(
                update={k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
            )
            overrides["http"] = http
            settings = settings.model_copy(update=overrides)
    except ConfigError as e:
        print(f"agenthub: {e}", file=sys.stderr)
        return 2
    # auto: readable on a terminal, JSON otherwise; configured once for the process, so its loggers are cached
    configure_logging(settings.log_level, settings.log_format, cache_loggers=True)
    # said again now that the daemon's log is set up: `load_settings` ran under `cli.main`'s muted logging
    warn_about_timeouts(settings)
    try:
        return run_daemon(settings, show_console_hint=args.console_hint)
    except DataDirLocked as e:
        print(f"agenthub: {e}", file=sys.stderr)
        return 3
    except ConfigError as e:
        print(f"agenthub: {e}", file=sys.stderr)
        return 2
    except (StorageError, AddressNotReadyError) as e:  # a store or an address not there (yet): systemd restarts
        print(f"agenthub: {e}", file=sys.stderr)  # the store's text names the key, never the DSN
        return 1
