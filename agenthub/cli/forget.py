"""`agenthub forget --channel C --sender ID [--agent A] [--yes]`: everything about one person, in every chat.

With a daemon running (it holds the data directory) the work goes to its admin route, so each session is redacted
under the daemon's own serialisation; otherwise this process takes the data directory's lock and does it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import getpass
import os
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import structlog

from agenthub import i18n
from agenthub.agent.definition import AgentDefinition, load_agents
from agenthub.channel.registry import unknown_channel
from agenthub.config import Settings, load_settings
from agenthub.errors import (
    AgentHubError,
    AgentNotFoundError,
    ConfigError,
    InvalidIdError,
    SessionBusyError,
    StorageError,
)
from agenthub.forget.command import jobs_hook
from agenthub.forget.index import IndexHook, drop_derived_index
from agenthub.forget.redact import Person
from agenthub.forget.service import Forgetter
from agenthub.forget.usage import usage_hook
from agenthub.gateway.session_lease import SessionLeases
from agenthub.hosting.datalock import DataDirLock, DataDirLocked, busy_text, daemon_holds, holder_address
from agenthub.invocation import command_name
from agenthub.log import configure_logging
from agenthub.memory.files import MemoryFiles
from agenthub.scheduler.core import Scheduler
from agenthub.search.kits import SEARCHERS
from agenthub.session.history import SessionHistory
from agenthub.session_keys import SessionKey, validate_agent_name, validate_part, validate_sender
from agenthub.storage.inbox import FileInbox
from agenthub.storage.singleton import InstanceLeases
from agenthub.storage.stores import Stores, open_stores
from agenthub.usage.spool import SPOOL_DIR

if TYPE_CHECKING:
    from agenthub.storage.postgres.search import PostgresSearchIndex
    from agenthub.storage.postgres.search_sync import PostgresIndexFeed

log = structlog.get_logger(__name__)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
REMOTE_TIMEOUT = aiohttp.ClientTimeout(total=600, sock_connect=10)


def add_parser(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "forget",
        help="delete everything about one person (messages, replies, summaries, profile, memory lines)",
        description=(
            "Redact one person's messages and the replies to them in every chat on a channel, drop the summaries "
            "of those chats, delete their profile and the memory lines that quote them. Works while the daemon "
            "runs (through its API, with a token)."
        ),
    )
    parser.add_argument("--channel", required=True, help="the channel the person writes on: wecom, feishu, http, cli")
    parser.add_argument("--sender", required=True, help="their sender id on that channel")
    parser.add_argument("--agent", default=None, help="only this agent's chats (default: every agent)")
    parser.add_argument("--yes", action="store_true", help="do not ask before acting")
    parser.add_argument("--token", default=None, help="API token for a running daemon (default: $AGENTHUB_TOKEN)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    configure_logging("info", "auto", stream=sys.stderr)
    locale = i18n.system_locale()
    try:
        settings = load_settings(args.config)
        person = Person(validate_part("channel", args.channel), validate_sender(args.sender))
        if args.agent is not None:
            validate_agent_name(args.agent)
        if (unknown := unknown_channel(person.channel)) is not None:  # a typo would forget nobody, "done"
            raise InvalidIdError(unknown)
    except (ConfigError, InvalidIdError) as e:
        print(f"agenthub forget: {e}", file=sys.stderr)
        return EXIT_USAGE
    if not args.yes and not _confirmed(person, args.agent, locale):
        print(i18n.text("forget.cli_cancelled", locale), file=sys.stderr)
        return EXIT_FAILED
    try:
        if daemon_holds(settings.data_dir):
            counts = asyncio.run(_forget_remote(settings, person, args))
        else:  # free, or held by another command (a chat without a daemon): `_forget_here` is refused the lock
            counts = asyncio.run(_forget_here(settings, person, args.agent))
    except DataDirLocked as e:
        print(f"agenthub forget: {busy_text(e, locale)}", file=sys.stderr)
        return EXIT_USAGE
    except AgentNotFoundError as e:
        print(f"agenthub forget: {e}", file=sys.stderr)
        return EXIT_USAGE
    except RemoteRefused as e:
        print(f"agenthub forget: {e}", file=sys.stderr)
        return e.exit_code
    except (StorageError, SessionBusyError) as e:  # a link planted inside data/, a full or read-only disk, a chat
        # another process would not let go of: what is done stays done
        print(f"agenthub forget: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(i18n.text("forget.cli_done", locale, **counts))
    return EXIT_OK


def _confirmed(person: Person, agent: str | None, locale: str) -> bool:
    agents = agent or i18n.text("forget.cli_all_agents", locale)
    prompt = i18n.text("forget.cli_ask", locale, channel=person.channel, sender=person.sender_id, agents=agents)
    print(prompt, end="", file=sys.stderr, flush=True)
    if sys.stdin is None:  # started with stdin closed (`<&-`): no answer can come, as at EOF
        print(file=sys.stderr)
        return False
    try:
        answer = sys.stdin.readline()
    except (OSError, ValueError):
        return False
    return answer.strip().lower() in ("yes", "y", "是")


async def _forget_here(settings: Settings, person: Person, agent: str | None) -> dict[str, int]:
    """No daemon: hold the data directory's lock (a daemon starting meanwhile is refused) and work on the stores
    `[store]` names (the files, or the histories and memory files in PostgreSQL)."""
    lock = DataDirLock(settings.data_dir)
    lock.acquire("forget")
    try:
        registry = load_agents(settings.agents_dir, default_agent=settings.default_agent)
        agents: list[AgentDefinition] = [registry.get(agent)] if agent else [registry.get(n) for n in registry.names()]
        stores = await open_stores(settings)
        try:
            await _refuse_while_instances_run(stores)
            history = _history_in(settings, stores)
            leases = _session_leases(settings, stores, history)
            forgetter = Forgetter(
                settings,
                history,
                MemoryFiles(settings.data_dir, settings.auth_dir, stores.memory),
                guard=functools.partial(_leased, leases, settings.session.lock_timeout_s + settings.store.lease_s),
                jobs=jobs_hook(Scheduler(settings.scheduler, stores.jobs)),  # the files, or the table `jobs`
                index=stores.search.open(OfflineIndexHooks(stores)),
                settled=lambda: _drop_settled_inbox(settings, stores),
                usage=usage_hook(stores.usage, spools=settings.data_dir / SPOOL_DIR),  # dead processes' spools too
            )
            try:
                report = await forgetter.forget_everywhere(agents, person, actor=f"cli:{_os_user()}")
            finally:
                await leases.close()
            await forgetter.history.aclose()
        finally:
            await stores.aclose()
        return report.as_dict()
    finally:
        lock.release()


async def _refuse_while_instances_run(stores: Stores) -> None:
    """PostgreSQL: an instance of the deployment running on any host keeps sessions in its cache (a redaction
    made here without their lease would not make it reload them, and its next write would put them back), runs
    L3 on material it read and keeps its own search index. Its forget route redacts each session under the
    session's lease and its own memory writers; so while any instance holds its `instance:` lease, nothing is
    done here (RemoteRefused, naming the route)."""
    running = await stores.running_instances()
    if running:
        hosts = ", ".join(sorted({holder.split(":", 1)[0] for holder in running}))
        text = i18n.text("forget.cli_instances_running", i18n.system_locale(), count=len(running), hosts=hosts)
        raise RemoteRefused(text, EXIT_USAGE)


def _session_leases(settings: Settings, stores: Stores, history: SessionHistory) -> SessionLeases:
    """This process's session leases on the deployment's lease store (PostgreSQL; in files mode they take
    nothing: the data directory's lock keeps every writer out)."""
    leases = InstanceLeases(store=stores.leases, holder=stores.holder, ttl_s=settings.store.lease_s)
    return SessionLeases(leases, history, on_lost=_lease_lost, keep_idle_s=0)  # a one-off: nothing kept


def _lease_lost(key: SessionKey) -> None:
    log.warning("forget_session_lease_lost", session_key=str(key))  # its writes from now on are refused


@contextlib.asynccontextmanager
async def _leased(leases: SessionLeases, limit_s: float, key: SessionKey) -> AsyncIterator[None]:
    """A session redacted under its lease: a gateway running it (an in-process `agenthub chat`, an instance
    started meanwhile) finishes first, and its next claim finds the fence raised and reloads the session."""
    await leases.claim_within(key, limit_s)
    try:
        yield
    finally:
        leases.release(key)


def _history_in(settings: Settings, stores: Stores) -> SessionHistory:
    return SessionHistory(store=stores.sessions)


async def _drop_settled_inbox(settings: Settings, stores: Stores) -> None:
    """The durable inbox keeps answered messages until it is compacted: compact it now (the daemon is not running).
    The stores' own (the files' journal shares the histories' commit log with them), and over PostgreSQL the files
    journal a data directory may still hold from before `store migrate`."""
    inbox = await asyncio.to_thread(lambda: stores.inbox)  # the files inbox reads its journal: off the loop
    await inbox.drop_settled()
    if isinstance(inbox, FileInbox):
        return
    left = await asyncio.to_thread(FileInbox, settings.data_dir, fsync=settings.session.fsync)
    try:
        await left.drop_settled()
    finally:
        await left.aclose()


class RemoteRefused(AgentHubError):
    """The daemon could not be reached or refused the request; `exit_code` is what the command exits with."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


async def _forget_remote(settings: Settings, person: Person, args: argparse.Namespace) -> dict[str, int]:
    """A daemon holds the data directory: `POST /api/forget` on it."""
    locale = i18n.system_locale()
    token = args.token or os.environ.get("AGENTHUB_TOKEN", "")
    address = holder_address(settings.data_dir) or f"{settings.http.host}:{settings.http.port}"
    if not token:
        command = f"{command_name()} token create --name cli"
        text = i18n.text("forget.cli_needs_token", locale, data_dir=settings.data_dir, address=address, command=command)
        raise RemoteRefused(text, EXIT_USAGE)
    body: dict[str, str] = {"channel": person.channel, "sender_id": person.sender_id}
    if args.agent:
        body["agent"] = args.agent
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with (
            aiohttp.ClientSession(timeout=REMOTE_TIMEOUT) as client,
            client.post(f"http://{address}/api/forget", json=body, headers=headers) as resp,
        ):
            data = await resp.json(content_type=None)
            if resp.status != 200:
                message = str((data.get("error") or {}).get("message", resp.reason))
                text = i18n.text("forget.cli_daemon_failed", locale, status=resp.status, message=message)
                raise RemoteRefused(text, EXIT_USAGE if resp.status in (400, 401, 404, 422) else EXIT_FAILED)
            return {str(k): int(v) for k, v in data["forgotten"].items()}
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, TypeError, AttributeError) as e:
        text = i18n.text("forget.cli_unreachable", locale, address=address, error=type(e).__name__)
        raise RemoteRefused(text, EXIT_FAILED) from None


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


class OfflineIndexHooks:
    """The forget hook for the index a backend keeps, with no daemon running: the files' per-agent index is removed
    whole (the next start rebuilds it from the redacted files); a shared index purges the redacted sessions and their
    `[search.embeddings]` vectors (whether or not embeddings are on now: vectors stored earlier hold the text too; a
    running daemon embeds the redacted text again at its next catch-up)."""

    def __init__(self, stores: Stores) -> None:
        self.stores = stores

    def beside_files(self, data_dir: Path) -> IndexHook:
        return functools.partial(drop_derived_index, data_dir)

    def shared_index(self, index: PostgresSearchIndex, feed: PostgresIndexFeed) -> IndexHook:
        search = SEARCHERS.shared_index(index, feed)
        open_vectors = self.stores.open_vectors

        async def purged(agent: str, keys: Sequence[SessionKey]) -> int:
            count = await search.purge(agent, keys)
            vectors = open_vectors()
            for key in keys:
                await vectors.drop_session(agent, str(key))
            await vectors.purge(agent)
            return count

        return purged
