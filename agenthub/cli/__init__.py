"""The `agenthub` command: `serve`, `chat` and `token` subcommands, each in its own module."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

SUBCOMMANDS = {
    "chat": "agenthub.cli.chat",
    "serve": "agenthub.cli.serve",
    "token": "agenthub.cli.token",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agenthub", description="AgentHub: LLM agents in every chat.")
    parser.add_argument("--config", type=Path, default=None, help="config file (default: ./agenthub.toml)")
    sub = parser.add_subparsers(dest="command", required=True)
    for module_name in SUBCOMMANDS.values():
        importlib.import_module(module_name).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
