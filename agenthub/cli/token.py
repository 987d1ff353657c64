"""`agenthub token create --name NAME` / `agenthub token list`: API tokens, stored only as hashes under auth/."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agenthub.config import load_settings
from agenthub.errors import ConfigError
from agenthub.tokens import TokenStore


def add_parser(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("token", help="manage HTTP API tokens")
    actions = parser.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="create a token and print it once")
    create.add_argument("--name", required=True, help="a label for the token, e.g. console or ci")
    actions.add_parser("list", help="list token names (never the tokens)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
        store = TokenStore(settings.auth_dir)
        if args.action == "create":
            token = store.create(args.name)
            print(token)
            print(f"Token {args.name!r} created. It is shown only this once; store it safely.", file=sys.stderr)
            return 0
        for stored in store.stored():
            print(f"{stored.name}\tcreated {stored.created_at}")
        return 0
    except (ConfigError, ValueError) as e:
        print(f"agenthub: {e}", file=sys.stderr)
        return 2
