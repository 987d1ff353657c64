"""`agenthub … --help`: every command and subcommand says what it does, and every option what it means."""

from __future__ import annotations

import argparse

import pytest

from agenthub.cli import build_parser


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _commands(sub, (*path, name))
    return found


COMMANDS = [c for c in _commands(build_parser()) if c]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_each_commands_help_describes_it_and_each_option(command: tuple[str, ...]) -> None:
    parser = build_parser()
    for name in command:
        [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = sub.choices[name]
    assert parser.description, f"`agenthub {' '.join(command)} --help` says nothing of what it does"
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            assert action.help, f"`agenthub {' '.join(command)}` {action.option_strings[0]} has no help"


RUNNABLE = [
    ["chat"],
    ["doctor"],
    ["forget", "--channel", "http", "--sender", "a"],
    ["migrate"],
    ["serve"],
    ["store", "init"],
    ["store", "migrate", "--from", "files", "--to", "postgres"],
    ["store", "reindex"],
    ["token", "create", "--name", "n"],
    ["token", "list"],
    ["token", "revoke", "n"],
]


@pytest.mark.parametrize("command", RUNNABLE, ids=" ".join)
def test_config_is_taken_before_or_after_the_subcommand(command: list[str]) -> None:
    """`agenthub --config a.toml serve` and `agenthub serve --config a.toml` mean the same (the later one wins)."""
    parse = build_parser().parse_args
    assert parse([*command, "--config", "b.toml"]).config.name == "b.toml"
    assert parse(["--config", "a.toml", *command]).config.name == "a.toml"
    assert parse(["--config", "a.toml", *command, "--config", "b.toml"]).config.name == "b.toml"
    assert parse(command).config is None


def test_every_runnable_command_is_checked() -> None:
    leaves = [c for c in COMMANDS if not any(other[: len(c)] == c and other != c for other in COMMANDS)]
    assert all(any(list(leaf) == command[: len(leaf)] for command in RUNNABLE) for leaf in leaves)
