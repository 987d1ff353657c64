"""Connection limits of the daemon's HTTP server: header and body timeouts, a connection cap, JSON protocol errors.

A connection must send a whole request head within `header_timeout_s` of opening or of its previous reply (aiohttp's
keep-alive timer, armed at connect, closes a connection still waiting for a head); a body must arrive whole within
`body_timeout_s` of its head (else 408); a head declaring a body over `max_body_bytes` gets a 413 at once. At most
`max_connections` are open: at the cap a new connection closes the longest-idle one (no request running), or, when
every one is busy, gets a 503. Hitting the cap (or the process's open-file limit) is logged once a minute, never once
per connection.
"""

from __future__ import annotations

import asyncio
import json
import resource
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import structlog
from aiohttp import web
from aiohttp.web_request import BaseRequest

log = structlog.get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
RESERVED_FDS = 256
"""Descriptors kept free below the open-file limit besides model connections: the listener's accept burst (its
backlog), storage files, logs, channel connections."""
UNLIMITED_FDS = 65_536
"""What the cap is derived from when the open-file limit is infinite."""
BACKLOG = 128
LIMIT_LOG_INTERVAL_S = 60.0
OUT_OF_FDS = "socket.accept() out of system resource"
"""asyncio's message when `accept()` fails with EMFILE/ENFILE; it repeats it for every retry."""


class BodyTimeoutError(TimeoutError):
    """The request body did not arrive whole within `http.body_timeout_s` of its head."""


@dataclass(frozen=True)
class ConnectionLimits:
    """What one client may hold of the server; `max_connections` None derives the cap from the open-file limit."""

    header_timeout_s: float = 15.0
    body_timeout_s: float = 60.0
    max_connections: int | None = None
    reserved_fds: int = RESERVED_FDS
    max_body_bytes: int | None = None
    """A request whose `Content-Length` says more is refused (413) before its body is read."""

    def connection_cap(self) -> int:
        return self.max_connections if self.max_connections is not None else self.fd_cap()

    def fd_cap(self) -> int:
        """The most connections the open-file limit leaves room for (the limit minus the reserve, at least half)."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        fds = UNLIMITED_FDS if soft == resource.RLIM_INFINITY else soft
        return max(fds - self.reserved_fds, fds // 2, 1)


def error_json(code: str, message: str) -> str:
    return json.dumps({"error": {"code": code, "message": message}})


class LimitLog:
    """One warning per interval while a limit is being hit, with how often it was hit since the last one."""

    def __init__(
        self, limit: int, *, interval_s: float = LIMIT_LOG_INTERVAL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.interval_s = interval_s
        self._clock = clock
        self._last: float | None = None
        self._counts: dict[str, int] = {}

    def hit(self, kind: str) -> None:
        self._counts[kind] = self._counts.get(kind, 0) + 1
        now = self._clock()
        if self._last is not None and now - self._last < self.interval_s:
            return
        self._last = now
        counts, self._counts = self._counts, {}
        log.warning(
            "http_connection_limit",
            max_connections=self.limit,
            **counts,
            hint="raise LimitNOFILE (and http.max_connections), or find the client holding connections",
        )


class ConnectionGuard:
    """Counts the server's connections and enforces the cap; the middleware marks which ones run a request."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.cap = limits.connection_cap()
        self.limit_log = LimitLog(self.cap)
        self._idle: dict[web.RequestHandler, None] = {}  # insertion order: longest idle first
        self._busy: set[web.RequestHandler] = set()

    @property
    def open(self) -> int:
        return len(self._idle) + len(self._busy)

    @property
    def busy(self) -> int:
        return len(self._busy)

    def admit(self, conn: web.RequestHandler) -> bool:
        """Count a new connection in; at the cap close the longest-idle one for it, or refuse it (False)."""
        if self.open >= self.cap:
            if not self._close_longest_idle():
                self.limit_log.hit("refused")
                return False
            self.limit_log.hit("closed_idle")
        self._idle[conn] = None
        return True

    def _close_longest_idle(self) -> bool:
        """Close the connection idle the longest (waiting for a request head, or between keep-alive requests)."""
        if not self._idle:
            return False
        victim = next(iter(self._idle))
        del self._idle[victim]
        victim.force_close()
        return True

    def release(self, conn: web.RequestHandler) -> None:
        self._idle.pop(conn, None)
        self._busy.discard(conn)

    def note_out_of_fds(self) -> None:
        """`accept()` failed for want of descriptors (a cap above what the process may open): free one by closing
        the longest-idle connection, as the cap would have."""
        self.limit_log.hit("accept_failed")
        self._close_longest_idle()

    def install_fd_filter(self, loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
        """Route asyncio's per-retry "accept() out of system resource" errors into the rate-limited line; every
        other loop error goes where it went before. Returns the undo."""
        previous = loop.get_exception_handler()

        def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            if context.get("message") == OUT_OF_FDS:
                self.note_out_of_fds()
            elif previous is not None:
                previous(loop, context)
            else:
                loop.default_exception_handler(context)

        loop.set_exception_handler(handler)
        return lambda: loop.set_exception_handler(previous)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Mark the connection busy while its request runs, and give its body `body_timeout_s` to arrive; refuse
        a declared body over `max_body_bytes` before waiting for any of it."""
        limit, declared = self.limits.max_body_bytes, request.content_length
        if limit is not None and declared is not None and declared > limit:
            log.warning("http_body_too_large", path=request.path, declared=declared, limit=limit)
            body = error_json("payload_too_large", f"the request body is larger than {limit} bytes")
            refused = web.Response(status=413, text=body, content_type="application/json")
            refused.force_close()
            await refused.prepare(request)
            await refused.write_eof()
            request.protocol.force_close()  # now: aiohttp would otherwise read ("linger" over) the body for 10 s
            return refused
        conn = request.protocol
        counted = conn in self._idle
        if counted:
            del self._idle[conn]
            self._busy.add(conn)
        deadline = self._arm_body_deadline(request)
        try:
            return await handler(request)
        finally:
            if deadline is not None:
                deadline.cancel()
            if counted and conn in self._busy:  # not if the connection was lost meanwhile
                self._busy.discard(conn)
                self._idle[conn] = None

    def _arm_body_deadline(self, request: web.Request) -> asyncio.TimerHandle | None:
        payload = request.content
        if payload.is_eof():
            return None

        def expire() -> None:
            if not payload.is_eof():
                payload.set_exception(BodyTimeoutError())

        handle = asyncio.get_running_loop().call_later(self.limits.body_timeout_s, expire)
        payload.on_eof(handle.cancel)
        return handle


REFUSED = (
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
    "Retry-After: 1\r\nContent-Length: {length}\r\n\r\n{body}"
)


def _refusal() -> bytes:
    body = error_json("too_many_connections", "the server has too many open connections; try again shortly")
    return REFUSED.format(length=len(body), body=body).encode()


class GuardedRequestHandler(web.RequestHandler):
    """aiohttp's HTTP/1 protocol, counted by a `ConnectionGuard`, answering its own protocol errors in JSON."""

    def __init__(self, manager: web.Server, *, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self._guard.admit(self):
            self._refused = True
            assert isinstance(transport, asyncio.WriteTransport)
            transport.write(_refusal())
            transport.close()
            return
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._guard.release(self)
        if not self._refused:
            super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._refused:
            super().data_received(data)

    def handle_error(
        self, request: BaseRequest, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        """A request aiohttp could not parse (or a failure outside every middleware): the JSON error shape, never
        the exception's text; a client's malformed request is one debug line, not a traceback."""
        if status >= 500:
            log.error("http_protocol_failure", status=status, error_type=_type_name(exc), exc_info=exc)
        else:
            log.debug("http_malformed_request", status=status, error_type=_type_name(exc))
        if request.writer.output_size > 0:
            raise ConnectionError("the response has started; no error response can follow it")
        code = PROTOCOL_ERROR_CODES.get(status, "bad_request" if status < 500 else "internal")
        response = web.Response(status=status, text=error_json(code, _phrase(status)), content_type="application/json")
        response.force_close()
        return response


PROTOCOL_ERROR_CODES = {413: "payload_too_large", 431: "headers_too_large", 504: "timeout"}


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase.lower()
    except ValueError:
        return "error"


def _type_name(exc: BaseException | None) -> str | None:
    return type(exc).__name__ if exc is not None else None
