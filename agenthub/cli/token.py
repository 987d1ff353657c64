"""`agenthub token create|list|revoke`: API tokens, stored only as hashes under auth/."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from agenthub.config import Settings, load_settings
from agenthub.errors import ConfigError, StorageError
from agenthub.invocation import command_name
from agenthub.storage.stores import open_stores
from agenthub.storage.tokens import StoredToken

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
CREATED_FORMAT = "%Y-%m-%d %H:%M"
"""`token list` prints `NAME<TAB>created YYYY-MM-DD HH:MM` in local time, one token a line."""


def add_parser(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser("token", help="manage HTTP API tokens")
    actions = parser.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="create a token and print it once")
    create.add_argument("--name", required=True, help="a label for the token, e.g. console or ci")
    actions.add_parser("list", help="list token names (never the tokens)")
    revoke = actions.add_parser("revoke", help="delete a token; a running daemon refuses it at once")
    revoke.add_argument("name", help="the token's name, as `token list` shows it")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
        return asyncio.run(_run(args, settings))
    except (ConfigError, ValueError) as e:
        print(f"agenthub: {e}", file=sys.stderr)
        return EXIT_USAGE
    except StorageError as e:
        print(f"agenthub: {e}", file=sys.stderr)
        return EXIT_FAILED


async def _run(args: argparse.Namespace, settings: Settings) -> int:
    """The three actions on the deployment's tokens (`auth/tokens.json`, or those every instance reads)."""
    stores = await open_stores(settings)
    try:
        tokens = stores.tokens
        if args.action == "create":
            token = await tokens.create(args.name)
            print(token)
            print(f"Token {args.name!r} created. It is shown only this once; store it safely.", file=sys.stderr)
            return EXIT_OK
        if args.action == "revoke":
            return _revoked(await tokens.revoke(args.name), args.name)
        for stored in await tokens.stored():
            print(list_line(stored))
        return EXIT_OK
    finally:
        await stores.aclose()


def _revoked(done: bool, name: str) -> int:
    if not done:
        print(f"agenthub: no token named {name!r} (see: {command_name()} token list)", file=sys.stderr)
        return EXIT_USAGE
    print(f"revoked {name}")
    return EXIT_OK


def list_line(stored: StoredToken) -> str:
    """One `token list` line: the name, a tab, and when it was created (local time; `unknown` if not recorded)."""
    created = time.strftime(CREATED_FORMAT, time.localtime(stored.created_at)) if stored.created_at > 0 else "unknown"
    return f"{stored.name}\tcreated {created}"
