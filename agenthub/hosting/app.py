"""The composition root: settings → agents, providers, history, gateway, memory, scheduler, the HTTP API and the
channels, built once here for both `agenthub serve` and `agenthub chat`."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import structlog

from agenthub.channel import Channel, ChannelContext, SessionResolver, Submitter, WebRoutes
from agenthub.channel.registry import enabled_channels, load_channel_class
from agenthub.clock import Clock, system_clock
from agenthub.config import Settings
from agenthub.gateway.turn_services import TurnServices
from agenthub.storage.singleton import InstanceLeases

if TYPE_CHECKING:
    from agenthub.api.host import ApiServices
    from agenthub.api.server import HttpApi
    from agenthub.channel.inbox_flow import InboxSubmitter
    from agenthub.forget.service import Forgetter
    from agenthub.gateway.core import GatewayCore
    from agenthub.memory.wiring import MemoryLayer
    from agenthub.scheduler.core import Scheduler
    from agenthub.scheduler.wiring import JobRunner
    from agenthub.search.api import Searcher
    from agenthub.session.history import SessionHistory
    from agenthub.storage.ports import IdempotencyStore, Inbox
    from agenthub.storage.stores import Stores
    from agenthub.storage.writer_thread import WriterThread
    from agenthub.web import WebServer

log = structlog.get_logger(__name__)
# The core's heavy parts (the LLM SDK behind the gateway, the web server) are imported by the functions that build
# them: `agenthub chat` connected to a daemon uses this module without ever loading them.


async def open_stores(settings: Settings) -> Stores:
    """The deployment's stores as `[store]` says; StorageError with one clear line when the database is not there."""
    from agenthub.storage.stores import open_stores as open_from_settings

    return await open_from_settings(settings)


@dataclass(frozen=True)
class Services:
    """What the composition root builds, as one record: the gateway (routing, queues, turns) and the features
    built around it, handed to whoever hosts them (the daemon, the CLI, the API, tests). Entering it enters the
    gateway."""

    gateway: GatewayCore
    memory: MemoryLayer | None = None
    """L2/L3 and their timers (already registered on the gateway)."""
    jobs: JobRunner | None = None
    """The scheduler and its lease; None when `[scheduler]` is off."""
    turn: TurnServices = field(default_factory=TurnServices)
    """What the gateway's turns were given at its construction (the inbox, usage, the memory's compactor): the
    same record, for the features built around the gateway (forgetting, the API, the metrics)."""

    @property
    def scheduler(self) -> Scheduler | None:
        return None if self.jobs is None else self.jobs.scheduler

    async def __aenter__(self) -> Services:
        await self.gateway.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.gateway.__aexit__(exc_type, exc, tb)


def build_gateway(
    settings: Settings,
    *,
    clock: Clock = system_clock,
    stores: Stores | None = None,
    leases: InstanceLeases | None = None,
    inbox: Inbox | None = None,
) -> GatewayCore:
    """`build_services(...).gateway`: for a caller that needs no feature's handle (the scheduler, the memory
    layer), which still run on it."""
    return build_services(settings, clock=clock, stores=stores, leases=leases, inbox=inbox).gateway


def build_services(
    settings: Settings,
    *,
    clock: Clock = system_clock,
    stores: Stores | None = None,
    leases: InstanceLeases | None = None,
    inbox: Inbox | None = None,
) -> Services:
    """A ready-to-enter gateway with the agents and providers the settings describe, and the features plugged in;
    its session histories and memory files in `stores` (default: the files of the data and auth directories);
    `leases`: the deployment's singleton leases (default: those of `stores`, else this instance's own, as in
    files mode, where it holds them all); `inbox`: the durable inbox the channels and the API will store into
    (`assemble` uses it), which the turns read their arrival order and ownership from (None: nothing stored)."""
    from agenthub.agent.definition import load_agents
    from agenthub.gateway.core import GatewayCore
    from agenthub.gateway.memory_host import MemoryPlugIn
    from agenthub.llm.registry import ProviderRegistry
    from agenthub.scheduler.wiring import JobRunner, build_scheduler
    from agenthub.search.vector_wiring import attach_vectors
    from agenthub.storage.migrate import migrate_at_start
    from agenthub.usage.wiring import build_usage, register_usage_command

    migrate_at_start(settings.workspace_dir, settings.agents_dir)
    agents = load_agents(settings.agents_dir, default_agent=settings.default_agent)
    providers = ProviderRegistry.from_settings(settings.llm)
    if leases is None and stores is not None:
        leases = InstanceLeases(store=stores.leases, holder=stores.holder, ttl_s=settings.store.lease_s)
    history = build_history(settings, clock, stores)
    memory = None if stores is None else stores.memory  # the memory files: the files of design §4, or PostgreSQL
    usage = build_usage(
        settings,
        clock,
        providers.call_log,
        None if stores is None else stores.usage,
        spool_thread=history_thread(history),
    )
    memory_layer = MemoryPlugIn()
    gateway = GatewayCore(
        settings,
        agents=agents,
        providers=providers,
        history=history,
        search=build_searcher(settings, stores, history),
        clock=clock,
        leases=leases,
        memory_store=memory,
        turn_services=TurnServices(inbox, usage),
        compaction=memory_layer,
    )
    scheduler = build_scheduler(settings, clock, None if stores is None else stores.jobs)
    jobs = None if scheduler is None else JobRunner(scheduler, gateway.leases)
    services = Services(gateway, memory_layer.layer, jobs, gateway.turn_services)
    plug_in_features(services)
    attach_vectors(gateway, None if stores is None else stores.open_vectors)
    register_usage_command(gateway.commands, usage)  # `/usage`, after the others in /help
    return services


def build_history(settings: Settings, clock: Clock, stores: Stores | None) -> SessionHistory:
    """The sessions of `stores`, else the files of the data directory (closed with the history)."""
    from agenthub.session.history import SessionHistory

    if stores is None:
        return SessionHistory(settings.data_dir, fsync=settings.session.fsync, clock=clock)
    return SessionHistory(store=stores.sessions, clock=clock)


def history_thread(history: SessionHistory) -> WriterThread | None:
    """The files history writer's thread (None on PostgreSQL): what must be on disk before an answer is shares it."""
    from agenthub.storage.files import FileSessionStore

    store = history.store
    return store.writer.thread if isinstance(store, FileSessionStore) else None


def build_searcher(settings: Settings, stores: Stores | None, history: SessionHistory) -> Searcher:
    """Memory search over the index `stores` keep (else the files' index beside the data); the files' searcher
    also takes the history writer's hand-overs, so an append is indexed from the lines as written."""
    from agenthub.search.kits import SearcherKit
    from agenthub.search.service import SearchService

    class FollowingSearchers(SearcherKit):
        def beside_files(self, data_dir: Path) -> Searcher:
            search = SearchService(data_dir)
            search.follow(history.store)
            return search

    kit = FollowingSearchers()
    return kit.beside_files(settings.data_dir) if stores is None else stores.search.open(kit)


def plug_in_features(services: Services) -> None:
    """The features' commands and platform tools, registered on the gateway: the built-ins with `/forget`, then
    `/jobs`; the tools `manage_cron_jobs` and `memory_search` after the memory tools (that order is the prompt's)."""
    from agenthub.agent.memory_search import memory_search_tool
    from agenthub.forget.command import ForgetCommand
    from agenthub.gateway.builtin_commands import register, register_builtin_commands
    from agenthub.scheduler.tool import cron_jobs_tool
    from agenthub.scheduler.wiring import JobsCommand

    gateway, scheduler, settings = services.gateway, services.scheduler, services.gateway.settings
    window_s = settings.session.restart_confirm_s
    forget = ForgetCommand(gateway, gateway.clock, window_s, lambda: gateway_forgetter(services))
    register_builtin_commands(gateway, features=(forget,))
    if scheduler is not None:
        register(gateway.commands, JobsCommand(scheduler, settings.scheduler.timezone, gateway.clock))
    gateway.tools.add(cron_jobs_tool(scheduler))
    gateway.tools.add(memory_search_tool())


def gateway_forgetter(services: Services) -> Forgetter:
    """A Forgetter on the daemon's own history cache and memory writers, each session redacted while held, no
    memory rewrite from material read before it ended written (L3 runs, flushes)."""
    from agenthub.forget.command import held, jobs_hook
    from agenthub.forget.service import Forgetter, no_memory_writers
    from agenthub.forget.usage import usage_hook

    gateway, layer, scheduler = services.gateway, services.memory, services.scheduler
    return Forgetter(
        gateway.settings,
        gateway.history,
        gateway.memory_files,
        guard=functools.partial(held, gateway),
        index=gateway.search.purge,  # the live index re-reads the redacted files (its file stays open)
        exclusive=layer.processor.forgetting if layer is not None else no_memory_writers,
        jobs=None if scheduler is None else jobs_hook(scheduler),
        settled=None if services.turn.inbox is None else services.turn.inbox.drop_settled,
        usage=None
        if services.turn.usage is None
        else usage_hook(services.turn.usage.store, services.turn.usage.recorder),
        kept=functools.partial(_drop_kept, gateway),
    )


def _drop_kept(gateway: GatewayCore) -> None:
    """What the daemon keeps between calls made of memory files and messages (the person's profile in a system
    prompt, its encoding and digest) goes after a forget."""
    from agenthub.llm.identity import drop_everything

    gateway.context.drop_kept()
    drop_everything()


def http_inbox(inbox: Inbox, gateway: GatewayCore, idempotency: IdempotencyStore) -> InboxSubmitter:
    """How the HTTP API's chat requests go through the inbox (new ones, and those resumed after a restart or taken
    over): each with its session, a keyed one's answer kept for its retries, one without a key answered (and
    settled) once its answer is stored."""
    from agenthub.api.idempotency import answer_recorder, answered_once_stored
    from agenthub.channel.inbox_flow import InboxSubmitter

    return InboxSubmitter(
        inbox,
        gateway,
        resolve=gateway.session_of,
        answered=answer_recorder(idempotency),
        answered_by_storing=answered_once_stored,
    )


def api_services(services: Services, inbox: Inbox, idempotency: IdempotencyStore) -> ApiServices:
    """The API's view of the core: the gateway behind the narrow `ApiHost` protocol, and the services the
    routes need that are built around it (forgetting a person, the memory thresholds, the inbox, the jobs)."""
    from agenthub.api.host import ApiServices
    from agenthub.memory.thresholds import thresholds_for

    gateway = services.gateway
    return ApiServices(
        gateway,
        forgetter=lambda: gateway_forgetter(services),
        thresholds=lambda agent: thresholds_for(gateway.settings, agent),
        inbox=http_inbox(inbox, gateway, idempotency),
        idempotency=idempotency,
        scheduler=services.scheduler,
        compactor=services.turn.compactor,
        usage=services.turn.usage,
    )


def build_api(
    services: Services, routes: WebRoutes, stores: Stores | None = None, inbox: Inbox | None = None
) -> HttpApi:
    """The HTTP API and console, its routes added to `routes`, its tokens from `stores` (default: the files), chat
    requests stored in `inbox` (an in-memory one when none is given); `ConfigError` for a bad `[channels.http]`."""
    from agenthub.api.server import HttpApi
    from agenthub.storage.idempotency import InMemoryIdempotency
    from agenthub.storage.inbox import InMemoryInbox

    settings = services.gateway.settings
    tokens = None if stores is None else stores.tokens
    window_s = settings.http.idempotency_window_s
    idempotency = InMemoryIdempotency(window_s=window_s) if stores is None else stores.idempotency(window_s)
    api = api_services(services, inbox or InMemoryInbox(), idempotency)
    return HttpApi(api, routes, settings.channels.get("http", {}), tokens)


def channel_context(
    settings: Settings,
    gateway: Submitter,
    routes: WebRoutes,
    name: str,
    stores: Stores | None = None,
    inbox: Inbox | None = None,
    leases: InstanceLeases | None = None,
    session_of: SessionResolver | None = None,
) -> ChannelContext:
    """What channel `name` is built with; its private state lives in `data/.channels/<name>/`, its dedup memories
    in `stores` (default: files there too); without an `inbox` (the in-process `agenthub chat`) accepted messages
    live as long as the process; `leases`: the gateway's (default: this instance's own); `session_of`: the
    gateway's routing, naming each accepted message's session."""
    from agenthub.storage.inbox import InMemoryInbox

    state_dir = settings.data_dir / ".channels" / name
    return ChannelContext(
        gateway=gateway,
        settings=settings,
        web=routes,
        state_dir=state_dir,
        inbox=inbox or InMemoryInbox(),
        leases=leases or InstanceLeases(ttl_s=settings.store.lease_s),
        open_seen_ids=None if stores is None else stores.seen_ids_for(name, state_dir),
        open_member_sends=None if stores is None else stores.member_sends_for(name),
        outbox=None if stores is None else stores.outbox,
        session_of=session_of,
    )


def web_server(
    settings: Settings, gateway: GatewayCore, stores: Stores | None = None, inbox: Inbox | None = None
) -> WebServer:
    """The daemon's one HTTP server, bounded as `[http]` says (nothing mounted or listening yet)."""
    from agenthub.web import WebServer
    from agenthub.web.http_guard import RESERVED_FDS, ConnectionLimits

    http = settings.http
    limits = ConnectionLimits(
        header_timeout_s=http.header_timeout_s,
        body_timeout_s=http.body_timeout_s,
        max_connections=http.max_connections,
        reserved_fds=RESERVED_FDS + settings.session.max_concurrent_llm,
    )
    return WebServer(
        gateway,
        host=http.host,
        port=http.port,
        max_body_bytes=http.max_body_bytes,
        limits=limits,
        inbox=inbox,
        stores=stores,
    )


def assemble(
    settings: Settings, services: Services, stores: Stores | None = None, *, inbox: Inbox | None = None
) -> tuple[WebServer, list[Channel]]:
    """The HTTP server with the API (unless `[http] enabled = false`) and every enabled channel built and their
    routes mounted (nothing started yet), all on one `inbox` (the daemon's durable one; an in-memory one when
    none is given). A channel that fails to build is logged by name and left out; the others go on. A bad
    `[channels.http]` is a `ConfigError`: it stops start-up."""
    from agenthub.api.server import api_config
    from agenthub.storage.inbox import InMemoryInbox
    from agenthub.web import usage_metrics

    api_config(settings.channels.get("http", {}))  # also with the server off: a stray key is never silently dropped
    gateway = services.gateway
    if inbox is None:  # the gateway's (`build_services(inbox=)`): its turns read the arrival order from it
        inbox = services.turn.inbox or (stores.inbox if stores is not None else InMemoryInbox())
    server = web_server(settings, gateway, stores, inbox)
    if services.turn.usage is not None:
        server.add_metrics(functools.partial(usage_metrics, services.turn.usage.recorder))
    routes = WebRoutes()
    built: list[Channel] = [build_api(services, routes, stores, inbox)] if settings.http.enabled else []
    for name, raw in enabled_channels(settings):
        try:
            context = channel_context(
                settings, gateway, routes, name, stores, inbox, gateway.leases, gateway.session_of
            )
            built.append(load_channel_class(name)(context, raw))
        except Exception as e:
            log.error("channel_failed_to_build", channel=name, error=str(e), error_type=type(e).__name__)
    server.mount(routes)
    return server, built
