"""`agenthub chat`: talk to an agent in this terminal (a REPL), or answer one message with `-m` and exit."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import sys
from collections.abc import Coroutine
from typing import Any

import aiohttp
import structlog

from agenthub import i18n
from agenthub.channel import Submitter, WebRoutes
from agenthub.config import Settings, load_settings
from agenthub.errors import AgentHubError, AgentNotFoundError, ConfigError, InvalidIdError, StorageError
from agenthub.gateway.handle import ReplyHandle
from agenthub.hosting.app import build_gateway, channel_context, open_stores
from agenthub.hosting.datalock import DataDirLock, DataDirLocked, busy_text, holder_address, is_daemon
from agenthub.hosting.remote import CHANNEL as SESSION_CHANNEL
from agenthub.hosting.remote import DaemonUnavailableError, RemoteGateway, TokenRefusedError
from agenthub.invocation import command_name
from agenthub.log import configure_logging, route_library_loggers
from agenthub.messages import ErrorCode, ErrorEvent, InboundMessage, OutboundMessage, Route

log = structlog.get_logger(__name__)

EXIT_OK, EXIT_REPLY_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
ROLE = "chat"
"""What a chat without a daemon records in the data directory's lock (`agenthub serve` and `forget` read it)."""
CHANNEL_MODULE = "channels.terminal"
PUSH_RETRY_S = 5.0
"""How long the REPL waits before it opens the daemon's events feed again after it dropped."""
OFFLINE_NOTICE_LOGGER = "agenthub.llm.registry"
"""Whose only warning is `llm_offline_mode`, which the terminal shows as the offline replies' own text instead."""
USAGE_CODES = frozenset({ErrorCode.INVALID_ID, ErrorCode.UNKNOWN_AGENT})
"""Reply error codes that mean the command line was wrong (exit 2), not that the reply failed (exit 1)."""


def add_parser(subparsers: Any) -> None:
    """Register `chat` on the `agenthub` command's subparsers."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "chat",
        help="chat with an agent in this terminal",
        description=(
            "Talk to an agent in this terminal. Enter sends, Esc+Enter or a trailing backslash adds a line, "
            "Ctrl-C stops a running reply, Ctrl-D quits. With -m, answer one message and exit: the reply "
            "goes to stdout (exit 0), an error to stderr (exit 1)."
        ),
    )
    parser.add_argument("--agent", default=None, help="agent to talk to (default: bindings, then the default agent)")
    parser.add_argument(
        "--chat-id",
        default=None,
        help="conversation id; the session is <agent>:http:<chat-id> (default: direct), with or without a daemon",
    )
    parser.add_argument("-m", "--message", default=None, help="answer this one message non-interactively")
    parser.add_argument(
        "--token", default=None, help="API token for a running daemon (default: $AGENTHUB_TOKEN); see connect mode"
    )
    parser.add_argument(
        "--log-level", default="warning", choices=["debug", "info", "warning", "error"], help="logs go to stderr"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """The `chat` subcommand; returns the process exit code."""
    configure_logging(args.log_level, "console", stream=sys.stderr)
    if args.log_level == "warning":  # without a key each offline reply says so itself: no log line repeats it
        logging.getLogger(OFFLINE_NOTICE_LOGGER).setLevel(logging.ERROR)
    if args.message is not None and not args.message.strip():
        print("agenthub chat: -m needs a non-empty message", file=sys.stderr)
        return EXIT_USAGE
    try:
        settings = load_settings(args.config)
        return asyncio.run(_chat(settings, args))
    except (ConfigError, AgentNotFoundError, InvalidIdError, TokenRefusedError) as e:
        print(f"agenthub chat: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (DaemonUnavailableError, StorageError) as e:
        print(f"agenthub chat: {e}", file=sys.stderr)
        return EXIT_REPLY_FAILED
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return EXIT_INTERRUPTED


def _channel_config(settings: Settings, args: argparse.Namespace) -> dict[str, Any]:
    """`[channels.cli]` with the command line's choices; the agent always named (flag, table, `bindings["cli"]`,
    the default agent): the session's channel is `http`, whose binding is not the terminal's."""
    config = dict(settings.channels.get("cli", {}))
    if args.agent is not None:
        config["agent"] = args.agent
    if args.chat_id is not None:
        config["chat_id"] = args.chat_id
    config["agent"] = config.get("agent") or settings.bindings.get("cli") or settings.default_agent
    return config


async def _chat(settings: Settings, args: argparse.Namespace) -> int:
    """Hold the data directory as `agenthub serve` does and chat on it; while a daemon holds it, through the daemon;
    while another command holds it (`forget`, another chat), refuse: two writers of one data directory would each
    replay their own commit log over what the other wrote."""
    lock = DataDirLock(settings.data_dir)
    try:
        lock.acquire(ROLE)
    except DataDirLocked as e:
        if is_daemon(e.holder):
            return await _chat_remote(settings, args)
        print(f"agenthub chat: {busy_text(e, i18n.channel_locale(settings, 'cli'))}", file=sys.stderr)
        return EXIT_REPLY_FAILED
    try:
        return await _chat_here(settings, args)
    finally:
        lock.release()


async def _chat_here(settings: Settings, args: argparse.Namespace) -> int:
    # the deployment's stores (on postgres its shared state: sessions, jobs, leases), as `serve` has them
    stores = await open_stores(settings)
    try:
        async with build_gateway(settings, stores=stores) as gateway:  # imports the LLM SDK: bad input answers first
            route_library_loggers()  # the SDKs imported just now
            channel = _build_channel(settings, args, gateway)
            config = channel.config
            route = Route(SESSION_CHANNEL, config.chat_id, agent=config.agent)
            _, key = gateway.resolve_route(route)  # a bad agent or chat id stops here, before any prompt
            banner = i18n.text("cli.banner.local", channel.locale, session=key, data_dir=settings.data_dir)
            log.info("chat_session", session_key=str(key), via="files", data_dir=str(settings.data_dir))
            return await _drive(channel, args, banner)
    finally:
        await stores.aclose()


async def _chat_remote(settings: Settings, args: argparse.Namespace) -> int:
    """A daemon holds the data directory: talk to it over its HTTP API instead of opening the files."""
    token = args.token or os.environ.get("AGENTHUB_TOKEN", "")
    address = holder_address(settings.data_dir) or f"{settings.http.host}:{settings.http.port}"
    if not token:
        print(
            f"agenthub chat: a daemon is running on {settings.data_dir} ({address}); pass --token or set "
            f"AGENTHUB_TOKEN (make one with: {command_name()} token create --name cli)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    config = _channel_config(settings, args)
    agent = str(config["agent"])  # as in-process: the same session whether or not a daemon runs
    async with RemoteGateway(f"http://{address}", token, default_agent=agent) as remote:
        watch = UsageWatch(remote)
        channel = _build_channel(settings, args, watch)
        remote.locale = channel.locale  # the replies in the language of the terminal's own texts
        chat_id = channel.config.chat_id
        await remote.check(agent, chat_id)  # a bad id, agent or token stops here, before any prompt
        relay = None if args.message is not None else relay_pushes(remote, channel, agent, chat_id)
        session = f"{agent}:{SESSION_CHANNEL}:{chat_id}"
        banner = i18n.text("cli.banner.remote", channel.locale, session=session, address=address)
        log.info("chat_session", session_key=session, via="daemon", address=address)
        return await _drive(channel, args, banner, watch, relay)


async def relay_pushes(remote: RemoteGateway, channel: Any, agent: str, chat_id: str) -> None:
    """While the REPL runs: the daemon's proactive messages for this session (reminders) are shown in it."""
    while True:
        try:
            async for text in remote.pushes(agent, chat_id):
                await channel.send(OutboundMessage("cli", chat_id, text, agent=agent))
        except (DaemonUnavailableError, aiohttp.ClientError, TimeoutError, ValueError) as e:
            log.info("push_feed_unavailable", error_type=type(e).__name__)
        await asyncio.sleep(PUSH_RETRY_S)


class UsageWatch:
    """A Submitter in front of another that remembers a reply refused for a usage reason (bad id, unknown
    agent): the daemon can still answer so, e.g. when an agent is removed between the check and the send."""

    def __init__(self, inner: Submitter) -> None:
        self._inner = inner
        self._last: ReplyHandle | None = None

    @property
    def accepting(self) -> bool:
        return self._inner.accepting

    async def submit(self, message: InboundMessage) -> ReplyHandle:
        self._last = await self._inner.submit(message)
        return self._last

    async def usage_error(self) -> ErrorEvent | None:
        """The last finished reply's error when its code is a usage error, else None."""
        if self._last is None or not self._last.finished:
            return None
        final = await self._last.result()
        return final if isinstance(final, ErrorEvent) and final.code in USAGE_CODES else None


def _build_channel(settings: Settings, args: argparse.Namespace, gateway: Submitter) -> Any:
    module = importlib.import_module(CHANNEL_MODULE)  # the core never imports channels/ statically
    context = channel_context(settings, gateway, WebRoutes(), "cli")
    return module.CliChannel(context, _channel_config(settings, args))


async def _drive(
    channel: Any,
    args: argparse.Namespace,
    label: str,
    watch: UsageWatch | None = None,
    background: Coroutine[Any, Any, None] | None = None,
) -> int:
    await channel.start()
    task = asyncio.create_task(background, name="cli-pushes") if background is not None else None
    try:
        if args.message is not None:
            code = int(await channel.ask(args.message))
            if code == EXIT_REPLY_FAILED and watch is not None and await watch.usage_error() is not None:
                return EXIT_USAGE
            return code
        if sys.stdin is None:  # started with stdin closed (`<&-`): nothing to read, as at EOF
            return EXIT_OK
        if not sys.stdin.isatty():  # lines piped in: answered one by one, no prompt drawn on a pipe
            return int(await channel.ask_lines(sys.stdin))
        return int(await channel.run_repl(label=label))
    except AgentHubError as e:
        log.error("chat_failed", error=str(e))
        return EXIT_REPLY_FAILED
    finally:
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await channel.stop()
