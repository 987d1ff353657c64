"""The daemon's one HTTP server: channel routes, /healthz, /readyz, /metrics, and JSON error bodies."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import structlog
from aiohttp import web

from agenthub.channel import WebRoutes
from agenthub.errors import HOST_HINT, AddressNotReadyError, PortUnavailableError, StorageError
from agenthub.jsonsafe import utf8_dumps
from agenthub.web.http_guard import BACKLOG, BodyTimeoutError, ConnectionGuard, ConnectionLimits, GuardedRequestHandler

if TYPE_CHECKING:
    from agenthub.gateway.core import GatewayCore
    from agenthub.storage.ports import Inbox
    from agenthub.storage.stores import Stores
    from agenthub.usage.recorder import UsageRecorder

log = structlog.get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MetricsSource = Callable[[], list[str]]

INBOX_DEPTH_CACHE_S = 1.5
"""How long /metrics reuses the inbox's count (on PostgreSQL a query over every instance's entries)."""


def error_body(code: str, message: str) -> dict[str, dict[str, str]]:
    return {"error": {"code": code, "message": message}}


def json_error(status: int, code: str, message: str) -> web.Response:
    return web.json_response(error_body(code, message), status=status, dumps=utf8_json)


def utf8_json(data: object) -> str:
    """JSON as the replies are: UTF-8 text, not `\\u` escapes (but a lone surrogate's: `jsonsafe.utf8_dumps`)."""
    return utf8_dumps(data)


_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
}


STORE_UNAVAILABLE = "the server's storage is unavailable; try again later"


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Turn aiohttp's HTTP exceptions (404, 405, 413 …), an unavailable store (503) and crashes into the
    documented JSON error shape."""
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400 or e.content_type == "application/json":
            raise
        return json_error(e.status, _STATUS_CODES.get(e.status, "error"), e.reason)
    except asyncio.CancelledError:
        raise
    except BodyTimeoutError:
        log.info("http_body_timeout", path=request.path)
        response = json_error(408, "request_timeout", "the request body did not arrive in time")
        response.force_close()
        return response
    except StorageError as e:  # the store is away (the database, a full disk): the client may try again
        log.warning("http_store_unavailable", path=request.path, error=str(e))
        return json_error(503, "storage_unavailable", STORE_UNAVAILABLE)
    except Exception as e:
        if isinstance(e, ConnectionError) and _client_gone(request):  # mid-body, mid-reply: nothing broke here
            log.info("http_client_gone", path=request.path, error_type=type(e).__name__)
            return json_error(400, "client_gone", "the connection was lost")
        log.exception("http_handler_failed", path=request.path)
        return json_error(500, "internal", "internal server error")


def _client_gone(request: web.Request) -> bool:
    """Whether this request's own connection is lost (not, say, a connection the handler opened to a platform)."""
    transport = request.transport
    return transport is None or transport.is_closing()


class WebServer:
    """Owns the aiohttp app and its listener. Routes are added before `start()`; `stop_listening()` then
    `close()` give a graceful shutdown."""

    def __init__(
        self,
        gateway: GatewayCore,
        *,
        host: str,
        port: int,
        max_body_bytes: int,
        limits: ConnectionLimits | None = None,
        inbox: Inbox | None = None,
        stores: Stores | None = None,
    ) -> None:
        self.gateway = gateway
        self.inbox = inbox
        self.stores = stores
        self.host = host
        self.port = port
        self.ready = False
        self.alive: Callable[[], bool] = lambda: True
        """Whether this instance holds its liveness lease (`InstanceInbox.alive`): while not, it accepts no message."""
        self.guard = ConnectionGuard(dataclasses.replace(limits or ConnectionLimits(), max_body_bytes=max_body_bytes))
        self.app = web.Application(client_max_size=max_body_bytes, middlewares=[json_errors, self.guard.middleware])
        self.app.router.add_get("/healthz", self._healthz)
        self.app.router.add_get("/readyz", self._readyz)
        self.app.router.add_get("/metrics", self._metrics)
        self._metrics_sources: list[MetricsSource] = []
        self._depth = 0
        self._depth_at: float | None = None
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None
        self._undo_fd_filter: Callable[[], None] | None = None

    def mount(self, routes: WebRoutes) -> None:
        self.app.add_routes(routes.routes)

    def add_metrics(self, source: MetricsSource) -> None:
        """Lines `source()` gives are appended to every /metrics answer."""
        self._metrics_sources.append(source)

    async def start(self) -> None:
        """Listen. Connections are aiohttp's protocol counted by the guard; aiohttp's keep-alive timer, armed at
        connect and after every reply, closes one still waiting for a whole request head (`header_timeout_s`)."""
        self._runner = web.AppRunner(self.app, handle_signals=False, shutdown_timeout=5.0)
        await self._runner.setup()
        server, loop = self._runner.server, asyncio.get_running_loop()
        assert server is not None
        keepalive_s = self.guard.limits.header_timeout_s

        def connection() -> GuardedRequestHandler:
            return GuardedRequestHandler(
                server, guard=self.guard, loop=loop, access_log=None, keepalive_timeout=keepalive_s
            )

        try:
            self._listener = await loop.create_server(connection, self.host, self.port, backlog=BACKLOG)
        except OSError as e:
            await self._runner.cleanup()
            raise _unavailable(self.host, self.port, e) from e
        self._undo_fd_filter = self.guard.install_fd_filter(loop)
        self.port = self._listener.sockets[0].getsockname()[1]
        log.info("http_listening", host=self.host, port=self.port, max_connections=self.guard.cap)
        if self.guard.cap > (room := self.guard.limits.fd_cap()):
            log.warning("http_max_connections_above_fd_limit", max_connections=self.guard.cap, fd_room=room)

    async def stop_listening(self) -> None:
        """Refuse new connections; requests already running go on."""
        self.ready = False
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    async def close(self) -> None:
        await self.stop_listening()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._undo_fd_filter is not None:
            self._undo_fd_filter()
            self._undo_fd_filter = None

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, request: web.Request) -> web.Response:
        if not self.ready:
            return web.json_response({"status": "starting"}, status=503)
        store = "files" if self.stores is None else self.stores.backend
        if self.stores is not None and not await self.stores.reachable():
            return web.json_response({"status": "store_unavailable", "store": store}, status=503)
        if not self.alive():
            return web.json_response({"status": "instance_lease_not_held", "store": store}, status=503)
        return web.json_response({"status": "ready", "agents": self.gateway.agents.names(), "store": store})

    async def _metrics(self, request: web.Request) -> web.Response:
        text = render_metrics(self.gateway, await self._inbox_depth())
        for source in self._metrics_sources:
            text += "\n".join(source()) + "\n"
        latency = None if self.stores is None else self.stores.latency
        if latency is not None:
            text += "\n".join(latency.exposition(STORE_LATENCY, "Store call latency (PostgreSQL).")) + "\n"
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def _inbox_depth(self) -> int:
        """The inbox's count over every instance; a shared one's is asked at most every `INBOX_DEPTH_CACHE_S` (the
        last one is shown while the store is away)."""
        if self.inbox is None:
            return 0
        now = time.monotonic()
        shared = self.stores is not None and self.stores.shared_between_instances
        if not shared or self._depth_at is None or now - self._depth_at >= INBOX_DEPTH_CACHE_S:
            try:
                self._depth = await self.inbox.count()
            except StorageError:
                return self._depth
            self._depth_at = now
        return self._depth


STORE_LATENCY = "agenthub_store_latency_seconds"


def usage_metrics(recorder: UsageRecorder) -> list[str]:
    """`agenthub_llm_tokens_total{agent,purpose,kind}` and `agenthub_budget_refusals_total{scope}` (design §15)."""
    lines = [
        "# HELP agenthub_llm_tokens_total Tokens of model calls as the vendor reported them (else estimated).",
        "# TYPE agenthub_llm_tokens_total counter",
    ]
    for (agent, purpose, kind), value in sorted(recorder.tokens.items()):
        labels = f'agent="{_label(agent)}",purpose="{_label(purpose)}",kind="{kind}"'
        lines.append(f"agenthub_llm_tokens_total{{{labels}}} {value}")
    lines += [
        "# HELP agenthub_budget_refusals_total Turns refused before any model call: a budget was used up.",
        "# TYPE agenthub_budget_refusals_total counter",
    ]
    for scope in ("user", "chat", "agent"):
        lines.append(f'agenthub_budget_refusals_total{{scope="{scope}"}} {recorder.refusals[scope]}')
    return lines


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_metrics(gateway: GatewayCore, inbox_depth: int = 0) -> str:
    """Prometheus text exposition of the gateway's counters and gauges."""
    s = gateway.stats
    lines = [
        "# HELP agenthub_turns_total Turns answered.",
        "# TYPE agenthub_turns_total counter",
        f"agenthub_turns_total {s.turns}",
        "# HELP agenthub_turn_errors_total Turns that ended in an error.",
        "# TYPE agenthub_turn_errors_total counter",
        f"agenthub_turn_errors_total {s.turn_errors}",
        "# HELP agenthub_turns_aborted_total Turns aborted by /stop, /restart, timeout or shutdown.",
        "# TYPE agenthub_turns_aborted_total counter",
        f"agenthub_turns_aborted_total {s.aborted}",
        "# HELP agenthub_llm_latency_seconds Model call latency.",
        "# TYPE agenthub_llm_latency_seconds histogram",
    ]
    for bound, count in s.llm_latency_buckets.items():
        label = "+Inf" if bound == float("inf") else repr(bound)
        lines.append(f'agenthub_llm_latency_seconds_bucket{{le="{label}"}} {count}')
    lines += [
        f"agenthub_llm_latency_seconds_sum {s.llm_seconds:.6f}",
        f"agenthub_llm_latency_seconds_count {s.llm_calls}",
        "# HELP agenthub_tokens_total Tokens reported by the model.",
        "# TYPE agenthub_tokens_total counter",
    ]
    for kind, value in s.tokens.as_dict().items():
        lines.append(f'agenthub_tokens_total{{kind="{kind.removesuffix("_tokens")}"}} {value}')
    lines += [
        "# HELP agenthub_active_sessions Live in-memory sessions.",
        "# TYPE agenthub_active_sessions gauge",
        f"agenthub_active_sessions {len(gateway.sessions)}",
        "# HELP agenthub_queue_depth Messages running or waiting in session queues.",
        "# TYPE agenthub_queue_depth gauge",
        f"agenthub_queue_depth {gateway.queue_depth()}",
        "# HELP agenthub_inbox_depth Accepted messages not answered yet (the durable inbox).",
        "# TYPE agenthub_inbox_depth gauge",
        f"agenthub_inbox_depth {inbox_depth}",
        *gateway.cache_watch.metrics(),
    ]
    return "\n".join(lines) + "\n"


def _unavailable(host: str, port: int, error: OSError) -> OSError | PortUnavailableError | AddressNotReadyError:
    """A port taken or refused, or a host name that does not exist, becomes a configuration error naming the address
    and its keys; an address or a resolver not there yet (boot) becomes a failure systemd restarts, said in the same
    one line; any other error stays as it is."""
    if isinstance(error, socket.gaierror):
        if error.errno == socket.EAI_AGAIN:  # the resolver is not there yet
            return AddressNotReadyError(host, port, "the host name does not resolve for now")
        return PortUnavailableError(host, port, "the host name does not resolve", HOST_HINT)
    if error.errno == errno.EADDRNOTAVAIL:  # the interface or its address (DHCP, a VIP) may come up after the unit
        return AddressNotReadyError(host, port, "the address is not one of this machine's")
    reasons = {errno.EADDRINUSE: "the port is already in use", errno.EACCES: "permission denied (a port below 1024?)"}
    reason = reasons.get(error.errno or 0)
    if reason is None:
        return error
    return PortUnavailableError(host, port, reason)
