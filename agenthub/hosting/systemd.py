"""systemd's notify protocol (READY=1, WATCHDOG=1, STOPPING=1) over `NOTIFY_SOCKET`, without a dependency."""

from __future__ import annotations

import asyncio
import os
import socket

import structlog

log = structlog.get_logger(__name__)


class Notifier:
    """Sends sd_notify datagrams when `NOTIFY_SOCKET` is set; does nothing otherwise."""

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        if address.startswith("@"):
            address = "\0" + address[1:]  # abstract namespace socket
        self._address = address or None
        usec = env.get("WATCHDOG_USEC", "")
        self.watchdog_interval_s = int(usec) / 2_000_000 if usec.isdigit() and int(usec) > 0 else None

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def notify(self, state: str) -> None:
        if self._address is None:
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.sendto(state.encode(), self._address)
        except OSError as e:
            log.warning("sd_notify_failed", state=state, error=str(e))

    async def watchdog(self) -> None:
        """Send WATCHDOG=1 at half the interval systemd asked for, until cancelled."""
        if self.watchdog_interval_s is None:
            return
        while True:
            self.notify("WATCHDOG=1")
            await asyncio.sleep(self.watchdog_interval_s)
