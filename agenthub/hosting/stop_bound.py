"""`StopBound`: the `agenthub serve` process ends within a bound after SIGTERM, even when its clean-up hangs."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading

import structlog

log = structlog.get_logger(__name__)

AFTER_DRAIN_S = 10.0
"""What the stop may take beyond `http.drain_timeout_s`: channels, leases, the store's last writes (the unit's
`TimeoutStopSec=45s` is 30 s of drain and this, with room to spare)."""


EXIT_CUT_SHORT = 1
"""The exit status of a stop cut at the bound: a failure (`systemctl status` shows it), not the 0 of a clean stop."""


class StopBound:
    """Once armed, a thread of its own (the event loop may be starved, or stuck in a call to a database that does
    not answer) ends the process `bound_s` later unless `disarm` came first. Nothing is lost by it: what a cut
    stop leaves (unsettled messages, unreleased leases) is what a `kill -9` leaves, and is answered or expires as
    after one."""

    def __init__(self, bound_s: float) -> None:
        self.bound_s = bound_s
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def arm(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="stop-bound", daemon=True)
            self._thread.start()

    def disarm(self) -> None:
        self._done.set()

    def _watch(self) -> None:
        if self._done.wait(self.bound_s):
            return
        try:  # best effort: a stream that cannot be written (closed, its reader gone) never keeps the process alive
            log.error("stop_cut_short", bound_s=self.bound_s)
            logging.shutdown()
            _say(
                f"agenthub: stop cut short after {self.bound_s:g} s (http.drain_timeout_s + {AFTER_DRAIN_S:g} s): "
                "the clean-up did not finish; what it left is taken up as after a crash"
            )
        finally:
            os._exit(EXIT_CUT_SHORT)


def _say(line: str) -> None:
    """`line` on stderr, then both streams flushed, each as far as it can be."""
    with contextlib.suppress(Exception):
        print(line, file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
