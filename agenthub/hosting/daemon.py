"""`agenthub serve`: runs what the composition root (`hosting.app`) builds: start-up in order, signals, drain."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from typing import TYPE_CHECKING, TextIO

import structlog

from agenthub.agent.definition import load_agents
from agenthub.channel import Channel
from agenthub.channel.inbox_flow import InstanceInbox, resume_http, resume_then_start
from agenthub.config import Settings
from agenthub.hosting.app import Services, assemble, build_services, http_inbox, open_stores
from agenthub.hosting.datalock import DAEMON, DataDirLock
from agenthub.hosting.gc_freeze import freeze_start_up_objects
from agenthub.hosting.stop_bound import AFTER_DRAIN_S, StopBound
from agenthub.hosting.systemd import Notifier
from agenthub.invocation import command_name
from agenthub.scheduler.wiring import pause_scheduler, start_scheduler, stop_scheduler
from agenthub.storage.atomic import remove_stale_temp_files
from agenthub.storage.stores import Stores
from agenthub.web import WebServer

if TYPE_CHECKING:
    from agenthub.gateway.core import GatewayCore

log = structlog.get_logger(__name__)

SCHEDULER_GRACE_S = 5.0
"""At shutdown, how long scheduled messages already being sent get to reach their platform."""


class Daemon:
    """Start-up in dependency order, shutdown in reverse: lock → gateway → channels → server → ready."""

    def __init__(
        self,
        settings: Settings,
        *,
        notifier: Notifier | None = None,
        console: TextIO | None = None,
        freeze_start_up: bool = False,
        bound_stop: bool = False,
    ) -> None:
        self.settings = settings
        self.freeze_start_up = freeze_start_up
        """Freeze the start-up objects out of the garbage collector once warmed up: only the `agenthub serve`
        process (`run_daemon`), never a process that runs a daemon among other work (tests)."""
        self.stop_bound = StopBound(settings.http.drain_timeout_s + AFTER_DRAIN_S) if bound_stop else None
        """Only the `agenthub serve` process: past the bound after SIGTERM it exits, clean-up done or not."""
        self.notifier = notifier or Notifier()
        self.console = console
        self.lock = DataDirLock(settings.data_dir)
        self.server: WebServer | None = None
        self.channels: list[Channel] = []
        self._stop = asyncio.Event()

    def request_stop(self) -> None:
        if self.stop_bound is not None:
            self.stop_bound.arm()
        self._stop.set()

    async def run(self) -> int:
        self.lock.acquire(DAEMON)
        try:
            await self._remove_stale_temp_files()
            stores = await open_stores(self.settings)  # a database that is not there stops start-up here
            try:
                await asyncio.to_thread(lambda: stores.inbox)  # the files inbox reads its journal: off the loop
                async with build_services(self.settings, stores=stores, inbox=stores.inbox) as services:
                    await self._serve(services, stores)
            finally:
                await stores.aclose()
        finally:
            self.lock.release()
            if self.stop_bound is not None:
                self.stop_bound.disarm()
        log.info("daemon_stopped")
        return 0

    async def _remove_stale_temp_files(self) -> None:
        """Temp files of writes a kill cut off; holding the data-dir lock, no other daemon is writing them."""
        roots = [self.settings.data_dir, self.settings.auth_dir]
        removed = await asyncio.to_thread(remove_stale_temp_files, roots)
        if removed:  # a start after a kill; nothing to say on every other start
            log.info("stale_temp_files_removed", count=removed)

    async def _serve(self, services: Services, stores: Stores) -> None:
        http, gateway = self.settings.http, services.gateway
        created_token = await self._first_console_token(stores)  # before channels start: the API warns if none
        server, self.channels = assemble(self.settings, services, stores)
        self.server = server
        inbox = stores.inbox
        idempotency = stores.idempotency(http.idempotency_window_s)  # a resumed request's answer is kept too
        resumed = http_inbox(inbox, gateway, idempotency)
        instance = InstanceInbox(inbox, gateway.leases, resumed, self.channels)
        await instance.open()  # alive before accepting anything: no survivor takes what this instance accepts
        server.add_metrics(instance.metrics)
        server.alive = lambda: instance.alive  # not ready while it accepts nothing
        unsettled = await inbox.unsettled()  # what the last run accepted and did not answer (files)
        await resume_http(resumed, unsettled)  # queued before the server listens: ahead of any new request
        await instance.take_over()  # postgres: what stopped instances left, ahead of new messages too
        await server.start()
        self.lock.acquire_info(f"http={http.host}:{server.port}")
        await resume_then_start(unsettled, self.channels)  # each chat's resumed entries before its new messages
        instance.start()
        await start_scheduler(services, self.channels)
        watchdog = asyncio.create_task(self.notifier.watchdog(), name="sd-watchdog")
        self._install_signals(gateway)
        server.ready = True
        self.notifier.notify("READY=1")
        gateway.providers.start_warm_up(then=freeze_start_up_objects if self.freeze_start_up else None)  # the SDK too
        log.info("daemon_ready", port=server.port, channels=[c.name for c in self.channels])
        self._print_console_hint(server.port, created_token)
        try:
            await self._stop.wait()
        finally:
            self._remove_signals()
            self.notifier.notify("STOPPING=1")
            watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watchdog
            await instance.stop_taking_over()
            await self._shutdown(services, server)
            await resumed.aclose()
            await instance.close()  # nothing of this instance runs now: what it left is a survivor's

    async def _shutdown(self, services: Services, server: WebServer) -> None:
        """Stop accepting, drain running turns (bounded), close channels in reverse order, then the server.
        Entries whose turn the shutdown cut stay unsettled: the next start (files) or a survivor (postgres)
        answers them."""
        gateway = services.gateway
        await pause_scheduler(services)
        await server.stop_listening()
        drained = await gateway.drain(self.settings.http.drain_timeout_s)
        log.info("daemon_drained", complete=drained)
        if not drained:  # tell the clients still waiting, while their connections are still open
            gateway.abort_all("shutdown")
            await gateway.drain(5.0)
        await stop_scheduler(services, grace_s=SCHEDULER_GRACE_S)  # fired jobs' sends, while channels are up
        for channel in reversed(self.channels):
            try:
                await channel.stop()
            except Exception:
                log.exception("channel_failed_to_stop", channel=channel.name)
        await server.close()

    def _install_signals(self, gateway: GatewayCore) -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self.request_stop)
        loop.add_signal_handler(signal.SIGINT, self.request_stop)
        loop.add_signal_handler(signal.SIGHUP, lambda: self.reload_agents(gateway))

    def _remove_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(signum)

    def reload_agents(self, gateway: GatewayCore) -> None:
        """SIGHUP: read the agent definitions again. An agent that was running but whose edited definition is now
        broken keeps its previous definition (a typo must not take a bound channel down); a deleted one goes."""
        previous = gateway.agents
        fresh = load_agents(self.settings.agents_dir, default_agent=self.settings.default_agent)
        for name, reason in fresh.errors.items():
            if name in previous.agents:
                fresh.agents[name] = previous.agents[name]
                log.error("agent_reload_kept_previous", agent=name, reason=reason)
        gateway.use_agents(fresh)
        log.info("agents_reloaded", agents=fresh.names(), broken=sorted(fresh.errors))

    async def _first_console_token(self, stores: Stores) -> str | None:
        """With the console hint on and no token anywhere, create one named `console`; return it (else None)."""
        if self.console is None:
            return None
        if await stores.tokens.has_tokens():  # the files, or the tokens every instance reads
            return None
        try:
            created = await stores.tokens.create("console")
        except ValueError:  # another instance starting at the same moment made it
            return None
        log.info("console_token_created", name="console")
        return created

    def _print_console_hint(self, port: int, created_token: str | None) -> None:
        if self.console is None:
            return
        host = self.settings.http.host
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        print(f"\nAgentHub is running. Web console: http://{shown}:{port}/", file=self.console)
        if created_token is not None:
            print(f"Created an API token (shown only once): {created_token}", file=self.console)
        else:
            print(
                f"Sign in with an API token; make a new one with: {command_name()} token create --name NAME",
                file=self.console,
            )
        print("Stop with Ctrl-C.\n", file=self.console, flush=True)


def run_daemon(settings: Settings, *, show_console_hint: bool = False) -> int:
    console = sys.stderr if show_console_hint else None
    daemon = Daemon(settings, console=console, freeze_start_up=True, bound_stop=True)
    return asyncio.run(daemon.run())
