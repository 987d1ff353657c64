"""Singletons: work that runs on one instance of a deployment at a time, while that instance holds its lease."""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog

from agenthub.clock import Clock, monotonic_clock, sleep_until
from agenthub.storage.lease import InProcessLeases, Lease, LeaseKeeper, LeaseTakeovers
from agenthub.storage.ports import LeaseStore

log = structlog.get_logger(__name__)

Action = Callable[[], Awaitable[None]]

DEFAULT_LEASE_S = 15.0


def instance_holder() -> str:
    """This instance's name as a lease holder: host, pid and a random part (a restarted pid is a new holder)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


@dataclass(frozen=True)
class InstanceLeases:
    """The leases one instance takes: the deployment's store, this instance's holder id, the lease time.

    Files mode: a store of its own (`InProcessLeases`), so every singleton is simply always held."""

    store: LeaseStore = field(default_factory=InProcessLeases)
    holder: str = field(default_factory=instance_holder)
    ttl_s: float = DEFAULT_LEASE_S
    clock: Clock = monotonic_clock
    takeovers: LeaseTakeovers = field(default_factory=LeaseTakeovers, compare=False)
    """The leases this instance gained after another holder had them (/metrics)."""

    def singleton(self, name: str, *, start: Action, stop: Action) -> Singleton:
        return Singleton(self, name, start=start, stop=stop)


class Singleton:
    """Runs `start` when lease `name` is gained and `stop` when it is lost or at `close()`; one change at a time,
    in order. `stop` must undo a `start` that was cut short, and may be called when nothing runs."""

    def __init__(self, leases: InstanceLeases, name: str, *, start: Action, stop: Action) -> None:
        self.name = name
        self._leases = leases
        self._start, self._stop = start, stop
        self._keeper = LeaseKeeper(
            leases.store,
            name,
            leases.holder,
            ttl_s=leases.ttl_s,
            on_gained=self._gained,
            on_lost=self._lost,
            clock=leases.clock,
            takeovers=leases.takeovers,
        )
        self._wanted = False
        self._started = False
        self._closing = False
        self._retry_pending = False
        self._changed = asyncio.Event()
        self._driver: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._started

    async def open(self) -> None:
        """Contend for the lease: a free one is taken and the work started before this returns; otherwise the
        work starts whenever the lease is gained later."""
        if self._driver is not None:
            return
        self._closing = False
        await self._keeper.step()
        if self._wanted:
            self._changed.clear()
            await self._start_work()
        self._driver = asyncio.create_task(self._drive(), name=f"singleton-{self.name}")
        self._keeper.start()

    async def close(self) -> None:
        """Stop the work (awaited), then release the lease, so a standby starts only once ours has stopped.

        If this is cancelled while the work is stopping, the lease is left to expire rather than released."""
        self._closing = True
        driver, self._driver = self._driver, None
        if driver is not None:
            driver.cancel()
            await asyncio.wait([driver])  # our own cancellation still propagates; the driver's does not
        if self._started:
            await self._stop_work()
        await self._keeper.stop()

    def _gained(self, lease: Lease) -> None:
        if not self._closing:
            self._wanted = True
            self._changed.set()

    def _lost(self) -> None:
        self._wanted = False
        self._changed.set()

    async def _drive(self) -> None:
        while True:
            while self._started != self._wanted:
                if not self._wanted:
                    await self._stop_work()
                elif self._retry_pending:  # held, but the last start failed: try again a renewal later
                    await sleep_until(self._leases.clock, self._leases.clock() + self._leases.ttl_s / 3)
                    self._retry_pending = False
                else:
                    await self._start_work()
            await self._changed.wait()
            self._changed.clear()

    async def _start_work(self) -> None:
        self._started = True  # from now on `stop` is owed, even if the start is cut short
        log.info("singleton_started", singleton=self.name)
        try:
            await self._start()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("singleton_start_failed", singleton=self.name)
            await self._stop_work()
            self._retry_pending = True

    async def _stop_work(self) -> None:
        if not self._closing:  # a shutdown is logged by whoever shuts down
            log.info("singleton_stopping", singleton=self.name)
        try:
            await self._stop()
        except asyncio.CancelledError:
            raise  # cut short: the stop is owed again by `close()`
        except Exception:  # logged; the driver must live on, or the lease would never start the work again
            log.exception("singleton_stop_failed", singleton=self.name)
        self._started = False  # only once stopped: a stop cut short is owed again by `close()`
