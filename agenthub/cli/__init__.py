"""The `agenthub` command: `serve`, `chat`, `doctor`, `token`, `migrate`, `forget`, `store`; each in its own module."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from agenthub.log import configure_logging

SUBCOMMANDS = {
    "chat": "agenthub.cli.chat",
    "doctor": "agenthub.cli.doctor",
    "forget": "agenthub.cli.forget",
    "migrate": "agenthub.cli.migrate",
    "serve": "agenthub.cli.serve",
    "store": "agenthub.cli.store",
    "token": "agenthub.cli.token",
}

CONFIG_HELP = "config file (default: ./agenthub.toml)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agenthub", description="AgentHub: LLM agents in every chat.")
    parser.add_argument("--config", type=Path, default=None, help=CONFIG_HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    for module_name in SUBCOMMANDS.values():
        importlib.import_module(module_name).add_parser(sub)
    _describe(parser)
    return parser


def _describe(parser: argparse.ArgumentParser) -> None:
    """Each (sub)command's `--help` opens with its one-line help when it has no longer description of its own, and
    each takes `--config` too (`agenthub serve --config x.toml` as `agenthub --config x.toml serve`)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, command in action.choices.items():
                command.description = command.description or helps.get(name)
                command.add_argument("--config", type=Path, default=argparse.SUPPRESS, help=CONFIG_HELP)
                _describe(command)


EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a command whose reader went away (`agenthub chat -m … | head`)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # `token`, `store` and `migrate` say what happened in their own lines (a failure in one line on stderr): their
    # logs stay off stdout (`TOKEN=$(agenthub token create …)`) and quiet (`store` and `migrate` show the stores'
    # warnings on stderr); `serve`, `chat`, `doctor` and `forget` set their own level and format
    configure_logging("critical", stream=sys.stderr)
    try:
        code: int = args.run(args)
    except BrokenPipeError:
        # the reader closed the pipe: stop quietly like other Unix tools, and keep the interpreter's final flush
        # of stdout from raising again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return code


if __name__ == "__main__":
    sys.exit(main())
